"""The schedule worker: arms each active schedule's next timer, and acts on the runs its
timers recorded (chorus.platform.gateway.adapters.schedules), one at a time, on the
service's clock.

A run is started as its creator's submission, with the Idempotency-Key
``schedule:<id>:<due>``: a crash after the workflow was accepted and before the run says
so starts nothing twice (the retry finds the same workflow). The overlap policy looks at
the schedule's latest started run, as the read model shows it: ``skip`` skips a run due
while that one's workflow still runs, ``buffer_one`` keeps one such run and starts it once
that workflow ended, ``allow`` starts every run. Replicas take different schedules and runs
(``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from pydantic import ValidationError

from chorus.base.errors import PersistentError
from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.base.tracing import request_span
from chorus.contracts.api.gateway import Submission
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import ScheduleDue
from chorus.contracts.platform import TimerSchedule
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.outbox import fire_target
from chorus.kernel.service import RuntimeHandle
from chorus.platform.gateway.adapters import repository, schedules
from chorus.platform.gateway.adapters.readmodel import ReadModel, ReadModelUnavailableError
from chorus.platform.gateway.domain import WorkflowType, workflow_types
from chorus.platform.gateway.routes.submit import Asked, begin
from chorus.web.apikeys import ApiKey, bearer
from chorus.web.http import api_client
from chorus.web.webapi import Problem

log = logging.getLogger("chorus.platform.gateway.schedules")

IDLE_S = 1.0
"""How often an idle worker looks for timers to arm and runs to act on; and how soon a
buffered run looks again at the workflow it waits for."""
SCHEDULE = "schedule"
"""The workflow type on a schedule's own events (its timer's): a schedule is no workflow."""


async def run_schedules(rt: RuntimeHandle) -> None:
    settings = rt.settings
    kinds = workflow_types(rt.registry, settings.deadlines_s)
    async with api_client(headers=bearer(settings.audit_api_key.get_secret_value())) as client:
        reads = ReadModel(client, settings.audit_url)

        async def round_() -> float:
            now = rt.clock.now()
            if await arm_one(rt, now) or await act_on_one(rt, reads, kinds, now):
                return 0.0
            return IDLE_S

        await forever("schedules", round_, every_s=IDLE_S, sleep=rt.clock.sleep, retry_s=1.0)


def due_timer(rt: RuntimeHandle, schedule_id: str, due_at: datetime, now: datetime) -> Envelope:
    """The timer.schedule command of a schedule's run at ``due_at``: the timer service fires
    the schedule.due prepared (and signed) here."""
    key = run_key(schedule_id, due_at)
    fired = start_envelope(
        ScheduleDue(schedule_id=schedule_id, due_at=due_at),
        workflow_id=schedule_id,
        workflow_type=SCHEDULE,
        producer=rt.producer,
        now=due_at,
        idempotency_key=key,
        event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"chorus:{key}"),
    )
    command = TimerSchedule(
        timer_id=f"gateway:{schedule_id}:{due_at.isoformat()}",
        due_at=due_at,
        fire=fire_target(rt.registry, fired, rt.signer),
    )
    return start_envelope(
        command,
        workflow_id=schedule_id,
        workflow_type=SCHEDULE,
        producer=rt.producer,
        now=now,
        idempotency_key=f"arm:{key}",
    )


async def arm_one(rt: RuntimeHandle, now: datetime) -> bool:
    """Arm the next timer of one schedule that has none; False when none needs one."""
    async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
        found = await schedules.to_arm(conn)
        if found is None or found.next_due_at is None:
            return False
        await tx.publish(due_timer(rt, found.schedule_id, found.next_due_at, now))
        await schedules.armed(conn, found.schedule_id, found.next_due_at)
    log.info(
        "schedule armed", extra=fields(schedule_id=found.schedule_id, due_at=found.next_due_at.isoformat())
    )
    return True


async def act_on_one(
    rt: RuntimeHandle, reads: ReadModel, kinds: Mapping[str, WorkflowType], now: datetime
) -> bool:
    """Start, buffer or skip one run that is due; False when none is. The run and its
    schedule stay locked until it is settled: replicas act on a schedule's runs one at a
    time, and a delete or pause waits for it (or it for them)."""
    async with rt.pool.acquire() as conn, conn.transaction():
        run = await schedules.next_run(conn, now)
        if run is None:
            return False
        found = await schedules.find(conn, run.schedule_id)  # locked with the run
        assert found is not None  # a run's schedule stays (deleting only marks it)
        key = run_key(found.schedule_id, run.due_at)
        # Accepted before a crash kept the run from saying so: it is that workflow's.
        accepted = await repository.find_by_key(conn, found.created_by, key)
        busy = None if accepted is not None else await _running(conn, reads, found)
        if accepted is not None:
            await schedules.settle(conn, run, schedules.STARTED, now=now, workflow_id=accepted.workflow_id)
        elif found.state != schedules.ACTIVE:
            await schedules.settle(
                conn, run, schedules.SKIPPED, now=now, detail=f"the schedule was {found.state}"
            )
        elif busy is not None and found.overlap == "skip":
            await schedules.settle(conn, run, schedules.SKIPPED, now=now, detail=f"{busy} was still running")
        elif busy is not None and found.overlap == "buffer_one":
            if run.status == schedules.DUE and await schedules.buffered_other(conn, run):
                detail = f"{busy} was still running and a run waited buffered already"
                await schedules.settle(conn, run, schedules.SKIPPED, now=now, detail=detail)
            else:
                await schedules.settle(
                    conn,
                    run,
                    schedules.BUFFERED,
                    now=now,
                    detail=f"waits for {busy} to end",
                    look_again_at=now + timedelta(seconds=IDLE_S),
                )
        else:
            workflow_id, refused = await _start(rt, kinds, found, key)
            if workflow_id is None:
                await schedules.settle(conn, run, schedules.SKIPPED, now=now, detail=refused)
            else:
                await schedules.settle(conn, run, schedules.STARTED, now=now, workflow_id=workflow_id)
    log.info(
        "schedule run acted on", extra=fields(schedule_id=run.schedule_id, due_at=run.due_at.isoformat())
    )
    return True


def run_key(schedule_id: str, due_at: datetime) -> str:
    """The Idempotency-Key of a run's submission (and its workflow's business key)."""
    return f"schedule:{schedule_id}:{due_at.isoformat()}"


async def _running(conn: asyncpg.Connection, reads: ReadModel, found: schedules.ScheduleRow) -> str | None:
    """The schedule's latest started workflow while it runs (None: none runs). One the read
    model does not show yet runs; so does one while the read model cannot say."""
    if found.overlap == "allow":
        return None
    latest = await schedules.latest_started(conn, found.schedule_id)
    if latest is None or latest.workflow_id is None:
        return None
    try:
        view = await reads.workflow(latest.workflow_id, for_whom=found.created_by)
    except ReadModelUnavailableError:
        return latest.workflow_id
    return latest.workflow_id if view is None or view.outcome is None else None


async def _start(
    rt: RuntimeHandle, kinds: Mapping[str, WorkflowType], found: schedules.ScheduleRow, key: str
) -> tuple[str | None, str]:
    """The run's workflow, accepted as its creator's submission: (its id, ""), or (None, why
    it could not be)."""
    kind = kinds.get(found.workflow_type)
    if kind is None:
        return None, f"no workflow type {found.workflow_type} any more"
    keys: Mapping[str, ApiKey] = rt.settings.api_keys
    if not any(k.principal == found.created_by and k.role == "submitter" for k in keys.values()):
        return None, f"{found.created_by}, its creator, holds no submitter's key any more"
    template = Envelope.model_validate(found.template["envelope"])
    try:
        given = await rt.sealer.open_event(template)
    except PersistentError as exc:  # its subject erased: its input is gone with it
        return None, f"its input can no longer be opened: {exc}"
    submission = {"input": given, "priority": found.priority, "deadline_s": found.deadline_s}
    typed: Any = Submission[kind.start]  # type: ignore[name-defined]
    try:
        body = typed.model_validate_json(json.dumps(submission))
    except ValidationError as exc:  # the start event's schema moved on since the schedule was made
        return None, f"its input is no {kind.start.event_type} any more: {exc.errors()[0]['msg']}"
    who = ApiKey(principal=found.created_by, role="submitter")
    asked = Asked(found.workflow_type, kind, body, who, key, None, found.template.get("subject_ref"))
    with request_span("gateway", f"scheduled {found.workflow_type}", None) as span:
        try:
            workflow_id, _ = await begin(rt, rt.settings.subject_key, replace(asked, traceparent=span))
        except Problem as exc:  # its events too large for their topic now, say
            return None, f"{exc.title}: {exc.detail}"
    return workflow_id, ""
