"""The soak's schedule and its slopes, without a deployment (the fast tier)."""

from __future__ import annotations

import itertools

from tests.soak import schedule
from tests.soak.report import RSS_BOUND_MIB_PER_H, fit, over, slopes
from tests.soak.sampler import Sample

SERVICES = ["gateway", "payment_agent", "timer_service", "approval_gate"]


def test_a_seed_draws_the_same_schedule_and_another_seed_another() -> None:
    first = schedule.draw(7, 60, SERVICES, 3)
    assert first == schedule.draw(7, 60, SERVICES, 3)
    assert first != schedule.draw(8, 60, SERVICES, 3)


def test_an_hour_has_a_fault_every_one_to_three_minutes_and_the_minimums() -> None:
    for seed in range(20):
        slots = schedule.draw(seed, 60, SERVICES, 3)
        gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(slots)]
        assert all(60 <= g <= 180 for g in gaps), gaps
        assert slots[-1].at_s <= 58 * 60  # the last two minutes recover
        faults = [f for s in slots for f in s.faults]
        assert sum(f.kind == "partition" for f in faults) >= schedule.MIN_PARTITIONS
        assert sum(len(s.faults) == 2 for s in slots) >= schedule.MIN_DOUBLES
        assert len(faults) >= 25
        assert {f.kind for f in faults} <= set(schedule.KINDS)


def test_a_slope_is_fitted_on_a_run_up_before_the_window_and_growth_of_ours_is_judged() -> None:
    assert round(fit([(0, 100.0), (1800, 101.0), (3600, 102.0)]), 6) == 2.0
    # Open files of a service: flat with two bursts of connections (the first hour's
    # notifier); then the same with one more leaked every six minutes.
    flat = [(i * 15.0, 49.0 if i in (11, 38) else 28.0 + i % 3) for i in range(42)]
    assert abs(fit(flat)) < 2.0
    assert round(fit([(t, v + t / 360) for t, v in flat])) == 10
    samples = []
    for i in range(241):  # an hour, one sample every 15 s
        t = i * 15.0
        leaking = 100 + 10 * t / 3600  # 10 MiB/h
        # Restarted at 45 min: a new pid, which warms up (its first minutes are no leak).
        pid, warming = (2, 80.0 + 40 * (t - 2700) / 900) if t >= 2700 else (1, 120.0)
        rss = {"leaky": leaking, "restarted": warming, "kafka-1": leaking}
        pids = {"leaky": 1, "restarted": pid, "kafka-1": 1}
        samples.append(Sample(t, i, i, rss_mib=rss, pids=pids))
    fitted = {s.process: s for s in slopes(samples, "rss_mib")}
    assert round(fitted["leaky"].per_hour, 3) == 10.0
    # Only the run that was up when the second half began counts: flat, 30 -> 45 min.
    assert fitted["restarted"].per_hour == 0.0
    assert fitted["restarted"].span_s == 885.0
    # A broker's JVM is reported, not judged.
    assert [s.process for s in over(list(fitted.values()), RSS_BOUND_MIB_PER_H)] == ["leaky"]
