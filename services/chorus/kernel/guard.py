"""Stop the consumer when a bad deploy would dead-letter everything.

Dead letters are cheap to redrive but expensive to sort through: ten thousand
of them because a handler raises on every input helps nobody. The guard is for
the service's *own* bugs, so it looks only at dead letters the code caused:

- it trips when more than ``max_consecutive`` of them arrive with no success in
  between, all with the same exception class from the same event type, across
  more than one workflow (one broken deploy, many inputs);
- or when more than ``max_ratio`` of the last ``window`` outcomes were such dead
  letters (a deploy that breaks on half of its inputs).

Dead letters caused by input never count and never trip it: undecodable records,
values PostgreSQL refuses, events too large to publish, a submitter's callback or
source URL that keeps failing (errors with ``caused_by_input``). A flood of those
from outside must not stop a service for everyone else.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class _Streak:
    signature: tuple[str, str] | None = None
    count: int = 0
    workflows: set[str] = field(default_factory=set)


class DeadLetterGuard:
    def __init__(self, max_consecutive: int = 25, max_ratio: float = 0.5, window: int = 200) -> None:
        self.max_consecutive = max_consecutive
        self.max_ratio = max_ratio
        self.window = window
        self._streak = _Streak()
        self._recent: deque[bool] = deque(maxlen=window)
        self.tripped = False

    @property
    def consecutive(self) -> int:
        return self._streak.count

    def record_success(self) -> None:
        self._streak = _Streak()
        self._recent.append(False)

    def record_dead_letter(
        self, *, error_class: str, event_type: str | None, workflow_id: str | None, caused_by_input: bool
    ) -> bool:
        """Count one more dead letter; True means stop instead of writing it."""
        if caused_by_input:
            return self.tripped
        signature = (error_class, event_type or "")
        if signature != self._streak.signature:
            self._streak = _Streak(signature)
        self._streak.count += 1
        if workflow_id is not None:
            self._streak.workflows.add(workflow_id)
        self._recent.append(True)
        full = len(self._recent) == self.window
        ratio = sum(self._recent) / len(self._recent)
        same_bug_everywhere = self._streak.count > self.max_consecutive and len(self._streak.workflows) > 1
        if same_bug_everywhere or (full and ratio > self.max_ratio):
            self.tripped = True
        return self.tripped

    def describe(self) -> str:
        error_class, event_type = self._streak.signature or ("?", "?")
        return (
            f"dead-letter guard tripped: {self._streak.count} dead letters in a row raising "
            f"{error_class} on {event_type or 'records'} across {len(self._streak.workflows)} workflows "
            f"(limit {self.max_consecutive}), "
            f"{sum(self._recent)}/{len(self._recent)} of recent outcomes (limit {self.max_ratio:.0%}). "
            "Stopping the consumer so a bad deploy does not dead-letter everything; "
            "uncommitted records will be redelivered after the fix."
        )
