"""How late a timer fired, and how long the firing loop may sleep."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from chorus.platform.timer_service.domain import lateness_s, next_wake_in_s

DUE = datetime(2026, 1, 5, 17, 0, tzinfo=timezone.utc)


def test_lateness_is_how_long_after_its_due_time_a_timer_fired_and_never_negative() -> None:
    assert lateness_s(DUE, DUE + timedelta(milliseconds=250)) == 0.25
    assert lateness_s(DUE, DUE) == 0.0
    assert lateness_s(DUE, DUE - timedelta(seconds=3)) == 0.0  # a replica's clock behind


def test_the_loop_sleeps_until_the_next_due_time_but_never_longer_than_its_idle_limit() -> None:
    now = DUE - timedelta(seconds=30)
    assert next_wake_in_s(now, None, 0.1) == 0.1  # nothing pending
    assert next_wake_in_s(now, DUE, 0.1) == 0.1  # a timer scheduled meanwhile waits at most that
    assert next_wake_in_s(now, DUE, 60.0) == 30.0
    assert next_wake_in_s(now, now - timedelta(seconds=5), 60.0) == 0.0  # overdue: at once
