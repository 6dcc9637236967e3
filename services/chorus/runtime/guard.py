"""Stop the consumer when a bad deploy would dead-letter everything.

Dead letters are cheap to redrive but expensive to sort through: ten thousand
of them because a handler raises on every input helps nobody. The guard trips
on ``max_consecutive`` dead letters with no success between them, or when more
than ``max_ratio`` of the last ``window`` outcomes were dead letters.
"""

from __future__ import annotations

from collections import deque


class DeadLetterGuard:
    def __init__(self, max_consecutive: int = 25, max_ratio: float = 0.5, window: int = 200) -> None:
        self.max_consecutive = max_consecutive
        self.max_ratio = max_ratio
        self.window = window
        self.consecutive = 0
        self._recent: deque[bool] = deque(maxlen=window)
        self.tripped = False

    def record_success(self) -> None:
        self.consecutive = 0
        self._recent.append(False)

    def record_dead_letter(self) -> bool:
        """Count one more dead letter; True means stop instead of writing it."""
        self.consecutive += 1
        self._recent.append(True)
        full = len(self._recent) == self.window
        ratio = sum(self._recent) / len(self._recent)
        if self.consecutive > self.max_consecutive or (full and ratio > self.max_ratio):
            self.tripped = True
        return self.tripped

    def describe(self) -> str:
        return (
            f"dead-letter guard tripped: {self.consecutive} dead letters in a row "
            f"(limit {self.max_consecutive}), "
            f"{sum(self._recent)}/{len(self._recent)} of recent outcomes (limit {self.max_ratio:.0%}). "
            "Stopping the consumer so a bad deploy does not dead-letter everything; "
            "uncommitted records will be redelivered after the fix."
        )
