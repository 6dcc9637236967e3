"""A stage closes when every sub-task reported or at its deadline, by its policy."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from chorus.contracts.lifecycle import StageDeadlineReached
from chorus.contracts.research import GatheredSource, SourceFetchRequested, SourceRef
from chorus.outside.stages import Stage, StagePolicy, StageStatus, open_stage

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
DEADLINE = NOW + timedelta(minutes=2)


def stage(policy: StagePolicy = StagePolicy.DEGRADE) -> Stage:
    return Stage(stage_id="sources", tasks=["alpha", "beta", "gamma"], policy=policy, deadline_at=DEADLINE)


def found(name: str) -> GatheredSource:
    return GatheredSource(name=name, excerpt=f"{name} says so")


def test_every_result_in_completes_the_stage_before_its_deadline() -> None:
    s = stage()
    for name in ("gamma", "alpha", "beta"):
        assert s.is_open
        s = s.record(name, NOW, result=found(name))
    assert s.status is StageStatus.COMPLETE and s.missing == []
    assert s.result("alpha", GatheredSource).excerpt == "alpha says so"


def test_at_the_deadline_degrade_goes_on_with_what_arrived_naming_what_is_missing() -> None:
    s = stage().record("alpha", NOW, result=found("alpha")).expire(DEADLINE)
    assert s.status is StageStatus.DEGRADED
    assert s.missing == ["beta", "gamma"]
    assert "missing beta, gamma" in s.why and s.closed_at == DEADLINE


def test_at_the_deadline_fail_fails_and_so_does_degrade_with_nothing_to_go_on() -> None:
    assert stage(StagePolicy.FAIL).record("alpha", NOW, result=found("alpha")).expire(DEADLINE).status == (
        StageStatus.FAILED
    )
    assert stage().expire(DEADLINE).status is StageStatus.FAILED


def test_a_failed_sub_task_closes_the_stage_early_once_all_reported() -> None:
    s = stage().record("alpha", NOW, result=found("alpha")).record("beta", NOW, failure="404")
    assert s.is_open
    s = s.record("gamma", NOW, result=found("gamma"))
    assert s.status is StageStatus.DEGRADED and s.failures == {"beta": "404"} and s.missing == ["beta"]


def test_a_late_result_is_recorded_and_changes_nothing_and_repeats_are_ignored() -> None:
    closed = stage().record("alpha", NOW, result=found("alpha")).expire(DEADLINE)
    late = closed.record("beta", DEADLINE + timedelta(seconds=5), result=found("beta"))
    assert late.late == ["beta"] and late.status is StageStatus.DEGRADED and late.missing == ["beta", "gamma"]
    assert late.record("alpha", NOW, result=found("alpha")) == late
    assert late.record("unknown", NOW, result=found("unknown")) == late
    assert late.expire(DEADLINE + timedelta(hours=1)) == late  # a late timer changes nothing


def test_opening_fans_out_one_event_per_task_and_a_deadline_timer_for_the_service() -> None:
    tasks = {
        name: SourceFetchRequested(
            stage_id="sources",
            task=name,
            source=SourceRef(name=name, url=f"https://sources.example.test/{name}"),
            topic="durable agents",
            answer_by=DEADLINE,
        )
        for name in ("alpha", "beta")
    }
    opened = open_stage("report_agent", "sources", tasks, policy=StagePolicy.FAIL, deadline_at=DEADLINE)
    assert opened.stage.tasks == ["alpha", "beta"] and opened.stage.is_open
    assert opened.emit == list(tasks.values())
    assert opened.timer.due_at == DEADLINE and opened.timer.timer_id == "stage:sources"
    assert opened.timer.event == StageDeadlineReached(
        stage_id="sources", service="report_agent", deadline_at=DEADLINE
    )
