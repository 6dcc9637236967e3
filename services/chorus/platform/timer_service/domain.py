"""Timer decisions, free of I/O."""

from __future__ import annotations

from datetime import datetime

PENDING = "pending"
FIRED = "fired"
CANCELLED = "cancelled"


def lateness_s(due_at: datetime, fired_at: datetime) -> float:
    """How late a timer fired; never negative (a timer never fires early)."""
    return max(0.0, (fired_at - due_at).total_seconds())


def next_wake_in_s(now: datetime, next_due: datetime | None, max_idle_s: float) -> float:
    if next_due is None:
        return max_idle_s
    return min(max_idle_s, max(0.0, (next_due - now).total_seconds()))
