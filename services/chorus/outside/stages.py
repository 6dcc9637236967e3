"""Stages: one step fanned out into parallel sub-tasks and fanned back in, by a deadline.

A handler opens a stage (:func:`open_stage`): it emits one event per sub-task — any
service handles them, in parallel — and schedules the stage's deadline as a durable
timer (``stage.deadline_reached``). The fan-in service keeps the :class:`Stage` in its
own checkpoint, so a crash mid-stage resumes with what had arrived. Each sub-task's
report is recorded (:meth:`Stage.record`); the stage closes when every sub-task has
reported, or when its deadline passes first (:meth:`Stage.expire`), and its policy says
what the missing ones mean:

- ``degrade``: go on with what arrived, saying what is missing (at least one result
  must have arrived: a stage with nothing to go on fails whatever its policy);
- ``fail``: the stage failed; the handler ends the workflow, and its end compensates.

A report arriving after the stage closed is recorded as late and changes nothing.
All of it is pure: the handler returns the emits and the timer in its Outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from chorus.base.compat import StrEnum
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import StageDeadlineReached
from chorus.kernel.service import CancelTimer, ScheduleTimer

M = TypeVar("M", bound=BaseModel)


class StagePolicy(StrEnum):
    DEGRADE = "degrade"
    FAIL = "fail"


class StageStatus(StrEnum):
    OPEN = "open"
    COMPLETE = "complete"
    """Every sub-task reported a result."""
    DEGRADED = "degraded"
    """Closed with some results missing (failed, or not there by the deadline)."""
    FAILED = "failed"


class Stage(BaseModel):
    """Where one stage stands; lives in the fan-in service's checkpoint."""

    model_config = ConfigDict(frozen=True)

    stage_id: str
    tasks: list[str]
    policy: StagePolicy
    deadline_at: datetime
    status: StageStatus = StageStatus.OPEN
    results: dict[str, dict[str, Any]] = {}
    failures: dict[str, str] = {}
    """Sub-tasks that reported they cannot be done, and why."""
    late: list[str] = []
    """Sub-tasks whose report came after the stage closed (recorded, ignored)."""
    reported_by: dict[str, str] = {}
    """Sub-task -> the traceparent of its report: the spans the fan-in links to
    (``chorus.tracing.link``), so a trace shows every cause of what follows the stage."""
    closed_at: datetime | None = None
    why: str = ""
    """How it closed, in words (for the workflow's record and the people who read it)."""

    @property
    def is_open(self) -> bool:
        return self.status is StageStatus.OPEN

    @property
    def missing(self) -> list[str]:
        """Sub-tasks without a result, in the order they were opened."""
        return [task for task in self.tasks if task not in self.results]

    def result(self, task: str, model: type[M]) -> M:
        return model.model_validate(self.results[task])

    def record(
        self,
        task: str,
        now: datetime,
        result: BaseModel | None = None,
        failure: str = "",
        traceparent: str = "",
    ) -> Stage:
        """The stage with ``task``'s report (a result, or a failure saying why; the
        ``traceparent`` of the event that brought it); it closes once every sub-task has
        reported. A repeated report, or one for a task the stage does not have, changes
        nothing; one after the close is recorded as late."""
        if task not in self.tasks or task in self.results or task in self.failures:
            return self
        if not self.is_open:
            return self.model_copy(update={"late": [*self.late, task]})
        if result is not None:
            update: dict[str, Any] = {"results": {**self.results, task: result.model_dump(mode="json")}}
        else:
            update = {"failures": {**self.failures, task: failure or "failed"}}
        if traceparent:
            update["reported_by"] = {**self.reported_by, task: traceparent}
        stage = self.model_copy(update=update)
        if len(stage.results) + len(stage.failures) < len(stage.tasks):
            return stage
        return stage._close(now, "every sub-task reported")

    def expire(self, now: datetime) -> Stage:
        """The stage at its deadline: closed by its policy if it was still open."""
        if not self.is_open:
            return self
        return self._close(now, f"deadline {self.deadline_at.isoformat()} passed")

    def _close(self, now: datetime, trigger: str) -> Stage:
        missing = self.missing
        if not missing:
            status, why = StageStatus.COMPLETE, f"complete: {trigger}"
        elif self.results and self.policy is StagePolicy.DEGRADE:
            status, why = StageStatus.DEGRADED, f"degraded: {trigger}; missing {', '.join(missing)}"
        else:
            status, why = StageStatus.FAILED, f"failed: {trigger}; missing {', '.join(missing)}"
        return self.model_copy(update={"status": status, "closed_at": now, "why": why})


@dataclass(frozen=True)
class Opened:
    """What opening a stage returns: keep ``stage`` in the state, emit ``emit``, schedule ``timer``."""

    stage: Stage
    emit: list[EventModel]
    timer: ScheduleTimer


def open_stage(
    service: str,
    stage_id: str,
    tasks: Mapping[str, EventModel],
    *,
    policy: StagePolicy,
    deadline_at: datetime,
) -> Opened:
    """Fan out: one event per sub-task (``task name -> event``) and the stage's deadline."""
    stage = Stage(stage_id=stage_id, tasks=list(tasks), policy=policy, deadline_at=deadline_at)
    deadline = StageDeadlineReached(stage_id=stage_id, service=service, deadline_at=deadline_at)
    timer = ScheduleTimer(deadline_timer_id(stage_id), deadline_at, deadline, purpose="deadline")
    return Opened(stage, list(tasks.values()), timer)


def deadline_timer_id(stage_id: str) -> str:
    return f"stage:{stage_id}"


def stop_deadline(stage: Stage) -> CancelTimer:
    """The deadline timer of a stage that closed before it (every sub-task reported)."""
    return CancelTimer(deadline_timer_id(stage.stage_id), f"stage {stage.status.value}")
