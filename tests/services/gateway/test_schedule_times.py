"""When a schedule's runs fall due (cron and interval, UTC), and which of them an outage
costs: runs due within the catch-up window are started late, older ones are missed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chorus.platform.gateway.domain import MAX_CAUGHT_UP, Cadence, CaughtUp, catch_up, next_due

T0 = datetime(2026, 3, 2, 9, 30, tzinfo=timezone.utc)  # a Monday
HOUR = timedelta(hours=1)


def test_a_cron_runs_at_its_times_in_utc_and_never_at_the_instant_asked_about() -> None:
    weekdays_at_nine = Cadence("0 9 * * 1-5", None, T0)
    assert next_due(weekdays_at_nine, T0) == datetime(2026, 3, 3, 9, 0, tzinfo=timezone.utc)
    friday = datetime(2026, 3, 6, 9, 0, tzinfo=timezone.utc)
    assert next_due(weekdays_at_nine, friday) == datetime(2026, 3, 9, 9, 0, tzinfo=timezone.utc)  # Monday
    # An offset time is the same instant: the answer is in UTC.
    berlin = T0.astimezone(timezone(timedelta(hours=1)))
    hourly = Cadence("0 * * * *", None, T0)
    assert next_due(hourly, berlin) == datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)


def test_an_interval_counts_from_the_schedules_creation_not_from_when_it_is_asked() -> None:
    hourly = Cadence(None, 3600, T0)
    assert next_due(hourly, T0) == T0 + HOUR
    assert next_due(hourly, T0 + timedelta(minutes=59)) == T0 + HOUR
    assert next_due(hourly, T0 + HOUR) == T0 + 2 * HOUR
    assert next_due(hourly, T0 - 5 * HOUR) == T0  # before its anchor: the anchor itself


def test_after_an_outage_runs_in_the_window_start_and_older_ones_are_missed() -> None:
    hourly = Cadence(None, 3600, T0)
    # Down from T0 until 3 h 5 min later; the window is two hours.
    caught = catch_up(hourly, T0, T0 + 3 * HOUR + timedelta(minutes=5), 2 * HOUR)
    assert caught.started == [T0 + 2 * HOUR, T0 + 3 * HOUR]
    assert (caught.missed, caught.missed_count) == ([T0 + HOUR], 1)
    # No window: runs due longer ago than the timers' lag are missed...
    caught = catch_up(hourly, T0, T0 + 3 * HOUR, timedelta(0))
    assert (caught.started, caught.missed) == ([T0 + 3 * HOUR], [T0 + HOUR, T0 + 2 * HOUR])
    # ... but a run whose timer fires a few seconds late is on time.
    assert catch_up(hourly, T0, T0 + HOUR + timedelta(seconds=5), timedelta(0)).started == [T0 + HOUR]
    # On time: the one run due.
    assert catch_up(hourly, T0, T0 + HOUR, 2 * HOUR) == CaughtUp([T0 + HOUR], [], 0)


def test_a_busy_schedule_down_for_long_starts_the_newest_runs_and_counts_every_one_it_missed() -> None:
    every_second = Cadence(None, 1, T0)
    # Down two hours, a window of one: 3,600 due within it, 3,600 before.
    caught = catch_up(every_second, T0, T0 + 2 * HOUR, HOUR)
    assert len(caught.started) == MAX_CAUGHT_UP and caught.started[-1] == T0 + 2 * HOUR
    assert len(caught.missed) == MAX_CAUGHT_UP and caught.missed_count == 7200 - MAX_CAUGHT_UP


@pytest.mark.parametrize(
    ("cron", "every_s", "says"),
    [
        (None, None, "either cron or every_s"),
        ("0 9 * * *", 60.0, "either cron or every_s"),
        ("0 9 * *", None, "five fields"),
        ("0 9 * * * *", None, "five fields"),
        ("61 * * * *", None, "no cron expression"),
        ("0 9 * * mon-xyz", None, "no cron expression"),
        ("0 0 30 2 *", None, "never falls due"),  # February the 30th
        ("H * * * *", None, "H and R fields are not taken"),  # a time of croniter's choosing
    ],
)
def test_a_cadence_that_cannot_run_says_why(cron: str | None, every_s: float | None, says: str) -> None:
    problem = Cadence(cron, every_s, T0).check()
    assert problem is not None and says in problem
