"""Where a hop's time goes, stage by stage: the benchmark's latency breakdown.

Off unless :func:`enable` is called (the bench worker does), and then nearly free when
off: each stage is one global read. When on, every stage appends (monotonic ns,
stage, event id) to a bounded buffer, and each committed step links the event it
handled to the events it emitted, so a reader can follow one event from its fetch
through the commit to its child's publication and the child's fetch.

Monotonic nanoseconds, not the injected clock: this measures the machine, not
workflow time, and no decision is taken on it.
"""

from __future__ import annotations

import time
import uuid
from collections import deque

STAGES = (
    "fetched",  # the consumer's getmany returned the record
    "dispatched",  # the pipeline starts on it (after the dispatcher's lane queue)
    "decoded",  # bytes -> validated event
    "loaded",  # inbox + checkpoint read
    "handled",  # the handler returned and its outcome was classified
    "committed",  # inbox + checkpoint + outbox committed
    "relay_read",  # (child) the relay has the outbox row in hand
    "sent",  # (child) handed to the producer
    "acked",  # (child) the broker acknowledged it
    "marked",  # (child) the outbox row is marked dispatched
)


class _Trace:
    """The recording, when on (None otherwise)."""

    marks: deque[tuple[int, str, str]] | None = None
    links: deque[tuple[str, str]] | None = None


_on = _Trace()


def enable(limit: int = 500_000) -> None:
    _on.marks, _on.links = deque(maxlen=limit), deque(maxlen=limit)


def disable() -> None:
    _on.marks = _on.links = None


def enabled() -> bool:
    return _on.marks is not None


def now() -> int:
    """A timestamp for :func:`mark_at` when tracing, 0 (and no clock read) when not."""
    return time.perf_counter_ns() if _on.marks is not None else 0


def mark(stage: str, event_id: uuid.UUID | str | None) -> None:
    if _on.marks is not None and event_id is not None:
        _on.marks.append((time.perf_counter_ns(), stage, str(event_id)))


def mark_at(ns: int, stage: str, event_id: uuid.UUID | str | None) -> None:
    if _on.marks is not None and event_id is not None and ns:
        _on.marks.append((ns, stage, str(event_id)))


def link(parent: uuid.UUID, children: list[uuid.UUID | None]) -> None:
    if _on.links is not None:
        _on.links.extend((str(parent), str(c)) for c in children if c is not None)


def drain() -> tuple[list[tuple[int, str, str]], list[tuple[str, str]]]:
    """Everything recorded so far (and forget it)."""
    if _on.marks is None or _on.links is None:
        return [], []
    marks, links = list(_on.marks), list(_on.links)
    _on.marks.clear()
    _on.links.clear()
    return marks, links
