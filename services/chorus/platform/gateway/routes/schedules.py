"""Schedules: start a workflow type with one input on a cron expression or an interval.

POST /v1/schedules (a submitter: each run is their submission), GET /v1/schedules and
/v1/schedules/{id} (with its latest runs), POST /v1/schedules/{id}/pause|resume|trigger and
DELETE /v1/schedules/{id} (its creator or an operator). The gateway's schedule worker
(chorus.platform.gateway.scheduled) arms each next run as a durable timer and starts the
runs the timers record.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Annotated, Literal

import asyncpg
from fastapi import Path
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from chorus.contracts.api.gateway import (
    SCHEDULE_ID_PATTERN,
    Schedule,
    ScheduleBody,
    ScheduleChange,
    ScheduleList,
    ScheduleRun,
)
from chorus.contracts.base import plain_input
from chorus.kernel.envelopes import start_envelope
from chorus.platform.gateway.adapters import schedules
from chorus.platform.gateway.domain import Cadence, next_due
from chorus.platform.gateway.routes.deps import (
    Anyone,
    Api,
    GatewayApi,
    IdempotencyKey,
    Submitter,
    invalid_input,
)
from chorus.platform.gateway.routes.submit import outbox_messages, refuse_inner_urls
from chorus.privacy.crypto import keyed_ref
from chorus.web.apikeys import ApiKey
from chorus.web.webapi import Problem, api_router, problems

router = api_router()
ScheduleId = Annotated[str, Path(max_length=40, pattern=SCHEDULE_ID_PATTERN)]
Action = Literal["pause", "resume", "trigger"]


@router.post("/v1/schedules", status_code=201, responses=problems(404, 409, 422))
async def create(
    body: ScheduleBody, who: Submitter, api: Api, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """A schedule of ``workflow_type`` with ``input``; its first run is the cadence's next
    time from now. Each run starts a workflow as your submission (its business key
    ``schedule:<id>:<due>``). A retry with the same Idempotency-Key answers the same schedule."""
    kind = api.kinds.get(body.workflow_type)
    if kind is None:
        raise Problem(
            422,
            "Unknown workflow type",
            f"no workflow type {body.workflow_type!r}; known: {sorted(api.kinds)}",
            errors=[{"pointer": "/workflow_type", "message": "no such workflow type"}],
        )
    now = api.rt.clock.now()
    cadence = Cadence(body.cron, body.every_s, now)
    wrong = cadence.check()
    if wrong is not None:
        where = "/cron" if body.cron is not None else "/every_s"
        raise Problem(422, "Invalid schedule", wrong, errors=[{"pointer": where, "message": wrong}])
    if body.deadline_s is not None and body.deadline_s > kind.deadline_s:
        detail = f"at most {kind.deadline_s:g} s, {body.workflow_type}'s deadline"
        raise Problem(422, "Invalid schedule", detail, errors=[{"pointer": "/deadline_s", "message": detail}])
    try:
        start = plain_input(kind.start).model_validate_json(json.dumps(body.input))
    except ValidationError as exc:
        raise invalid_input(exc) from None
    await refuse_inner_urls({"input": body.input})
    digest = hashlib.sha256(body.model_dump_json().encode()).hexdigest()
    async with api.rt.pool.acquire() as conn:
        if idempotency_key:
            earlier = await schedules.find_by_key(conn, who.principal, idempotency_key)
            if earlier is not None:
                return await _replayed(api, conn, earlier, digest)
        schedule_id = f"sch-{uuid.uuid4().hex}"
        # The input waits sealed under the schedule's (or its subject's) key: erasing the
        # subject makes the next runs impossible, as it should.
        template = start_envelope(
            start,
            workflow_id=schedule_id,
            workflow_type=body.workflow_type,
            producer=api.rt.producer,
            now=now,
            idempotency_key=f"template:{schedule_id}",
            subject_ref=keyed_ref(api.settings.subject_key, body.subject_ref) if body.subject_ref else None,
        )
        sealed = await api.rt.sealer.seal(template)
        # Too large for its topic: a 413 naming the field now, never a run that cannot start
        # (sealed already, it is not sealed again).
        await outbox_messages(api.rt, [(sealed, "/input")])
        row = schedules.ScheduleRow(
            schedule_id=schedule_id,
            workflow_type=body.workflow_type,
            # The subject's keyed reference only (what every run's events carry), never the ref.
            template={"envelope": sealed.model_dump(mode="json"), "subject_ref": sealed.subject_ref},
            cron=body.cron,
            every_s=body.every_s,
            anchor_at=now,
            overlap=body.overlap,
            catchup_window_s=body.catchup_window_s,
            priority=body.priority,
            deadline_s=body.deadline_s,
            note=body.note,
            created_by=who.principal,
            created_at=now,
            state=schedules.ACTIVE,
            last_due_at=now,
            next_due_at=next_due(cadence, now),
            armed_for=None,
            request_hash=digest,
        )
        async with conn.transaction():
            inserted = await schedules.insert(conn, row, idempotency_key)
            if inserted:
                await schedules.changed(conn, schedule_id, who.principal, "create", now)
        if not inserted:
            assert idempotency_key is not None  # only a key's unique index makes an insert lose
            winner = await schedules.find_by_key(conn, who.principal, idempotency_key)
            assert winner is not None
            return await _replayed(api, conn, winner, digest)
        view = await _view(api, conn, row)
    return JSONResponse(view.model_dump(mode="json"), status_code=201, headers={"Location": view.status_url})


async def _replayed(
    api: GatewayApi, conn: asyncpg.Connection, earlier: schedules.ScheduleRow, digest: str
) -> JSONResponse:
    if earlier.request_hash != digest:
        raise Problem(409, "Idempotency key reused", "this Idempotency-Key was used for a different schedule")
    view = await _view(api, conn, earlier)
    headers = {"Location": view.status_url, "Idempotent-Replayed": "true"}
    return JSONResponse(view.model_dump(mode="json"), status_code=201, headers=headers)


@router.get("/v1/schedules", responses=problems(403))
async def listed(who: Anyone, api: Api) -> ScheduleList:
    """Operators and auditors see every schedule; a submitter its own."""
    if who.role not in ("operator", "auditor", "submitter"):
        raise Problem(403, "Forbidden", f"a {who.role} has no schedules to see")
    async with api.rt.pool.acquire() as conn:
        rows = await schedules.listed(conn, who.principal if who.role == "submitter" else None)
        return ScheduleList(schedules=[await _view(api, conn, row) for row in rows])


@router.get("/v1/schedules/{schedule_id}", responses=problems(404))
async def one(schedule_id: ScheduleId, who: Anyone, api: Api) -> Schedule:
    async with api.rt.pool.acquire() as conn:
        found = await _readable(conn, schedule_id, who, acting=False)
        return await _view(api, conn, found)


@router.post("/v1/schedules/{schedule_id}/{action}", responses=problems(403, 404, 409))
async def act(schedule_id: ScheduleId, action: Action, who: Anyone, api: Api) -> Schedule:
    """pause: no run falls due until resumed (runs due and not started are skipped); resume:
    runs fall due again from now (none of the paused time is caught up); trigger: one run now
    (the overlap policy applies). Its creator may do each, an operator pause it."""
    now = api.rt.clock.now()
    async with api.rt.pool.acquire() as conn, conn.transaction():
        found = await _readable(conn, schedule_id, who, acting=True)
        if found.state == schedules.DELETED:
            raise Problem(409, "Deleted", f"schedule {schedule_id} was deleted")
        if action in ("trigger", "resume") and found.created_by != who.principal:
            # Each run is its creator's submission: an operator, who may rewrite the approval
            # policy, never submits (pausing and deleting stop runs; they start none).
            raise Problem(403, "Forbidden", f"only its creator may {action} schedule {schedule_id}")
        if action == "trigger":
            if found.state == schedules.PAUSED:
                raise Problem(409, "Paused", f"schedule {schedule_id} is paused: resume it first")
            await schedules.add_run(conn, schedule_id, now, "manual", now)
        elif (action == "pause") == (found.state == schedules.ACTIVE):
            await schedules.set_state(
                conn, schedule_id, schedules.PAUSED if action == "pause" else schedules.ACTIVE, now
            )
        await schedules.changed(conn, schedule_id, who.principal, action, now)
        updated = await schedules.find(conn, schedule_id)
        assert updated is not None
        return await _view(api, conn, updated)


@router.delete("/v1/schedules/{schedule_id}", responses=problems(403, 404))
async def delete(schedule_id: ScheduleId, who: Anyone, api: Api) -> Schedule:
    """No more runs: those due and not started yet are skipped. Its runs stay listed."""
    now = api.rt.clock.now()
    async with api.rt.pool.acquire() as conn, conn.transaction():
        found = await _readable(conn, schedule_id, who, acting=True)
        if found.state != schedules.DELETED:
            await schedules.set_state(conn, schedule_id, schedules.DELETED, now)
            await schedules.changed(conn, schedule_id, who.principal, "delete", now)
        updated = await schedules.find(conn, schedule_id)
        assert updated is not None
        return await _view(api, conn, updated)


async def _readable(
    conn: asyncpg.Connection, schedule_id: str, who: ApiKey, *, acting: bool
) -> schedules.ScheduleRow:
    """The schedule, if ``who`` may see it (operators and auditors any, a submitter its
    own) or, ``acting``, change it (its creator, an operator); the same 404 otherwise."""
    # Acting, the row is locked until the caller's transaction ends: a delete and a resume
    # at once are one after the other, and the delete stands.
    found = await schedules.find(conn, schedule_id, lock=acting)
    own = found is not None and who.role == "submitter" and found.created_by == who.principal
    allowed = own or who.role == "operator" or (who.role == "auditor" and not acting)
    if found is None or not allowed:
        if found is not None and who.role == "auditor":
            raise Problem(403, "Forbidden", "an auditor reads schedules; it does not change them")
        raise Problem(404, "Unknown schedule", f"no schedule {schedule_id!r}")
    return found


async def _view(api: GatewayApi, conn: asyncpg.Connection, row: schedules.ScheduleRow) -> Schedule:
    runs = await schedules.runs(conn, row.schedule_id)
    changes = await schedules.changes(conn, row.schedule_id)
    return Schedule(
        schedule_id=row.schedule_id,
        workflow_type=row.workflow_type,
        cron=row.cron,
        every_s=row.every_s,
        overlap=row.overlap,
        catchup_window_s=row.catchup_window_s,
        priority=row.priority,
        note=row.note,
        created_by=row.created_by,
        created_at=row.created_at,
        state=row.state,
        next_due_at=row.next_due_at if row.state == schedules.ACTIVE else None,
        runs=[
            ScheduleRun(
                due_at=r.due_at,
                kind=r.kind,
                status=r.status,
                workflow_id=r.workflow_id,
                detail=r.detail,
                at=r.at,
            )
            for r in runs
        ],
        changes=[ScheduleChange(at=c.at, by=c.by, action=c.action) for c in changes],
        status_url=f"{api.base_url}/v1/schedules/{row.schedule_id}",
    )
