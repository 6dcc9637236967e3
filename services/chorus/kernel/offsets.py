"""Which offset is safe to commit when records of one partition finish out of order.

Records of different workflows on one partition run concurrently, so offset 12
may finish before offset 10. Committing 13 then would lose 10 and 11 on a crash
(faust-streaming #606). The committable offset is one past the longest prefix of
finished records.
"""

from __future__ import annotations

from collections import deque


class PartitionOffsets:
    def __init__(self) -> None:
        self._order: deque[int] = deque()
        self._done: set[int] = set()
        self._committable: int | None = None
        self._committed: int | None = None

    def track(self, offset: int) -> None:
        self._order.append(offset)

    def finish(self, offset: int) -> None:
        self._done.add(offset)
        while self._order and self._order[0] in self._done:
            first = self._order.popleft()
            self._done.discard(first)
            self._committable = first + 1

    @property
    def in_flight(self) -> int:
        return len(self._order)

    def to_commit(self) -> int | None:
        """The offset to commit now, or None when nothing new finished."""
        if self._committable is None or self._committable == self._committed:
            return None
        return self._committable

    def committed(self, offset: int) -> None:
        self._committed = offset

    @property
    def last_committed(self) -> int | None:
        return self._committed
