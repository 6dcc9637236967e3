"""Timer decisions, free of I/O."""

from __future__ import annotations

from datetime import datetime
from typing import Any

PENDING = "pending"
FIRED = "fired"
CANCELLED = "cancelled"


def stamp_fired(envelope: dict[str, Any], fired_at: datetime) -> dict[str, Any]:
    """The stored envelope as published: unchanged but for ``occurred_at`` = when it fired.

    The event id stays, so a consumer that already saw an earlier copy drops it.
    """
    return {**envelope, "occurred_at": fired_at.isoformat()}


def lateness_s(due_at: datetime, fired_at: datetime) -> float:
    """How late a timer fired; never negative (a timer never fires early)."""
    return max(0.0, (fired_at - due_at).total_seconds())


def next_wake_in_s(now: datetime, next_due: datetime | None, max_idle_s: float) -> float:
    if next_due is None:
        return max_idle_s
    return min(max_idle_s, max(0.0, (next_due - now).total_seconds()))
