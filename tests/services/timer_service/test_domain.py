"""When a timer fires, how late it was, and how long the firing loop may sleep."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from timer_service.domain import lateness_s, next_wake_in_s, stamp_fired

DUE = datetime(2026, 1, 5, 17, 0, tzinfo=UTC)


def test_a_fired_envelope_is_the_stored_one_stamped_with_the_firing_time() -> None:
    stored = {
        "event_id": str(uuid.uuid4()),
        "event_type": "approval.window_elapsed",
        "occurred_at": "2026-01-05T09:00:00+00:00",
        "workflow_id": "wf-1",
        "payload": {"approval_id": "appr-1", "level": 0},
    }
    kept = dict(stored)
    fired = stamp_fired(stored, DUE + timedelta(seconds=1))
    assert fired["occurred_at"] == "2026-01-05T17:00:01+00:00"
    # Same event id: a consumer that saw an earlier copy of this firing drops this one.
    assert {k: v for k, v in fired.items() if k != "occurred_at"} == {
        k: v for k, v in stored.items() if k != "occurred_at"
    }
    assert stored == kept  # the row's envelope is not changed in place


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
