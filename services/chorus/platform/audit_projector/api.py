"""The projection's read API (FastAPI; OpenAPI at /openapi.json), beside ``/health`` and
``/metrics``.

Other services learn a workflow's status, timeline and approvals here, never from the
projector's tables (the gateway answers its users from this API, with its own key).

GET /v1/workflows?status=&workflow_type=&stage=&submitted_by=&started_after=&started_before=&q=&query=&cursor=
                                           a page of workflows (no personal data), next_cursor
GET /v1/workflows/{workflow_id}            status, stage, what it waits for
GET /v1/workflows/{workflow_id}/timeline   its events in the order they happened
GET /v1/approvals?tier=<tier>              open approvals, soonest deadline first
GET /v1/approvals/{approval_id}            one approval gate, decided or not
POST /v1/erasures                          erase a data subject: {"subject_ref"};
                                           202 with the erasure; every service confirms later
GET /v1/erasures/{erasure_id}              the erasure, which services confirmed it
                                           (``confirmations``) and which not yet (``pending``)
GET /v1/access?subject_ref=<ref>           reads of the subject's personal data (access log)

Personal data is kept sealed (chorus.privacy.crypto) and opened for each reader; every such read
is logged (principal, the person a service read for, workflow, fields, time). Values of an
erased subject show as "(erased)".
POST /v1/replays                           rebuild the projection from the topics into a fresh
                                           schema: {"since", "verify", "drop", "live_timeout_s"};
                                           202 with the job
GET /v1/replays/{replay_id}                the job: state, progress, result, comparison

Every route takes an API key (:mod:`chorus.web.apikeys`): reads are for operators, auditors
and services (the gateway); erasures and replays for operators, and the erasure's actor
is the key's principal.

Errors are RFC 9457 problem+json: 404 an unknown id, 400 a parameter over its bound,
415 a body that is not JSON, 413 one over 1 MiB, 422 a body naming the failing field.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from chorus.contracts.api.audit_projector import (
    CURSOR_PATTERN,
    AccessLog,
    AccessRead,
    ApprovalTasks,
    Erasure,
    ErasureRequest,
    ErasureStarted,
    ReplayRequest,
    Timeline,
)
from chorus.contracts.search import MAX_QUERY, SearchQueryError, attribute_types, parse
from chorus.kernel.service import RuntimeHandle
from chorus.platform.audit_projector.adapters import access, queries
from chorus.platform.audit_projector.adapters.maintenance import Announcer, erase_subject, erasure
from chorus.platform.audit_projector.adapters.queries import Order, WorkflowFilter
from chorus.platform.audit_projector.config import Settings
from chorus.platform.audit_projector.replays import ReplayJobs
from chorus.privacy.crypto import as_keyed, subject_hash
from chorus.web.apikeys import ApiKey, role
from chorus.web.typedclient import bound, provided
from chorus.web.webapi import Problem, QueryDateTime, api_router, problems

MAX_ID = 200


@dataclass(frozen=True)
class AuditApi:
    """What the routes work with: the runtime, the projector's settings, the services that
    confirm an erasure, and the replay jobs of this process."""

    rt: RuntimeHandle
    settings: Settings
    data_holders: list[str]
    replays: ReplayJobs

    @property
    def schema(self) -> str:
        return self.rt.service

    @classmethod
    def of(cls, rt: RuntimeHandle) -> AuditApi:
        # A runner started with plain ServiceSettings (an embedding) gets the defaults.
        settings = rt.settings if isinstance(rt.settings, Settings) else Settings()
        return cls(rt, settings, sorted(settings.data_holders or [rt.service]), ReplayJobs(rt))


Api = Annotated[AuditApi, Depends(provided("audit", AuditApi))]
Reader = Annotated[ApiKey, Depends(role("operator", "auditor", "service"))]
Operator = Annotated[ApiKey, Depends(role("operator"))]
Auditor = Annotated[ApiKey, Depends(role("operator", "auditor"))]
ON_BEHALF_OF = "X-Chorus-On-Behalf-Of"
"""Whom a service (the gateway) reads for: the access log names them beside the service."""
Id = Annotated[str, Path(max_length=MAX_ID)]

router = api_router(responses=problems(400, 401, 403, 404, 415, 422))


def routes(rt: RuntimeHandle) -> APIRouter:
    """The read API of the projector ``rt`` runs."""
    return bound(router, audit=AuditApi.of(rt))


def pending(api: AuditApi, found: dict[str, Any]) -> dict[str, Any]:
    """Which data holders have not confirmed yet (``complete`` when none)."""
    confirmed = found["confirmations"]
    waiting = [s for s in api.data_holders if confirmed.get(s, {}).get("parts", 0) < found["parts"]]
    return {"pending": waiting, "complete": not waiting}


async def one(
    api: AuditApi,
    read: Callable[..., Awaitable[BaseModel | None]],
    key: str,
    what: str,
    reader: ApiKey,
    request: Request,
) -> dict[str, Any]:
    """The projection's ``what`` of ``key`` as JSON, opened for ``reader``; 404 when none."""
    async with api.rt.pool.acquire() as conn:
        found = await read(conn, key, schema=api.schema)
    if found is None:
        raise Problem(404, "Not found", f"no {what} {key!r}")
    body = found.model_dump(mode="json")
    [shown] = await opened(api, reader, request, [(body.get("workflow_id", key), body)])
    return shown


async def opened(
    api: AuditApi, reader: ApiKey, request: Request, items: list[tuple[str, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """``items`` (each of one workflow) with their personal data opened, and each read
    of it in the access log: who, for whom (a service reading for its caller), which
    workflow and fields, when."""
    shown: list[dict[str, Any]] = []
    accesses: list[tuple[str, list[str]]] = []
    for workflow_id, body in items:
        found = await api.rt.sealer.open_all(body)
        shown.append(found.value)
        if found.pointers:
            accesses.append((workflow_id, found.pointers))
    if accesses:
        behalf = request.headers.get(ON_BEHALF_OF) if reader.role == "service" else None
        async with api.rt.pool.acquire() as conn:
            await access.record(
                conn,
                ledger=api.schema,
                schema=api.schema,
                accesses=accesses,
                principal=reader.principal,
                on_behalf_of=behalf[:MAX_ID] if behalf else None,
                route=request.url.path[:MAX_ID],
                at=api.rt.clock.now(),
            )
    return shown


@router.get("/v1/workflows", tags=["workflows"])
async def workflows(
    api: Api,
    who: Reader,
    status: Annotated[
        list[Annotated[str, Field(max_length=40)]] | None,
        Query(max_length=20, description="any of these (repeat): e.g. attention, waiting, completed"),
    ] = None,
    workflow_type: Annotated[str | None, Query(max_length=MAX_ID)] = None,
    stage: Annotated[str | None, Query(max_length=MAX_ID, description="the latest event type")] = None,
    submitted_by: Annotated[
        str | None, Query(max_length=1024, description="a principal, or its keyed form")
    ] = None,
    started_after: Annotated[QueryDateTime | None, Query(description="inclusive")] = None,
    started_before: Annotated[QueryDateTime | None, Query(description="exclusive")] = None,
    q: Annotated[str | None, Query(max_length=255, description="a workflow id or business key")] = None,
    query: Annotated[
        str | None,
        Query(
            max_length=MAX_QUERY,
            description="a search over the search attributes, status, workflow_type and stage: "
            "vendor = 'acme' AND amount > 10000 AND status = 'waiting' (chorus.contracts.search)",
        ),
    ] = None,
    order: Annotated[Order, Query(description="newest started first, or longest quiet first")] = (
        Order.NEWEST
    ),
    cursor: Annotated[
        str | None,
        Query(pattern=CURSOR_PATTERN, description="next_cursor of a page (it keeps its order)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Workflows matching every filter given, a page at a time (keyset: follow
    ``next_cursor``); ``attention`` ones say why and since when. No personal data."""
    try:
        condition = parse(query, attribute_types(api.rt.registry)) if query is not None else None
    except SearchQueryError as exc:
        raise Problem(400, "Invalid query", str(exc)) from None
    where = WorkflowFilter(
        workflow_type=workflow_type,
        statuses=tuple(status or ()),
        stage=stage,
        submitter_ref=as_keyed(api.settings.subject_key, submitted_by) if submitted_by else None,
        started_after=started_after,
        started_before=started_before,
        search=q,
        condition=condition,
    )
    async with api.rt.pool.acquire() as conn:
        page = await queries.list_workflows(
            conn, where, order=order, cursor=cursor, limit=limit, schema=api.schema
        )
    return page.model_dump(mode="json")


@router.get("/v1/workflows/{workflow_id}", tags=["workflows"])
async def workflow(workflow_id: Id, api: Api, who: Reader, request: Request) -> dict[str, Any]:
    return await one(api, queries.status_view, workflow_id, "workflow", who, request)


@router.get("/v1/workflows/{workflow_id}/timeline", tags=["workflows"])
async def timeline(workflow_id: Id, api: Api, who: Reader, request: Request) -> dict[str, Any]:
    async with api.rt.pool.acquire() as conn:
        entries = await queries.timeline_entries(conn, workflow_id, schema=api.schema)
    body = Timeline(workflow_id=workflow_id, timeline=entries).model_dump(mode="json")
    [shown] = await opened(api, who, request, [(workflow_id, body)])
    return shown


@router.get("/v1/workflows/{workflow_id}/signals/{signal_id}/answer", tags=["workflows"])
async def signal_answer(
    workflow_id: Id, signal_id: Id, api: Api, who: Reader, request: Request
) -> dict[str, Any]:
    """The workflow's answer to a signal (its event, as in the timeline); 404 until it gave one
    (the gateway asks again while an update waits)."""
    async with api.rt.pool.acquire() as conn:
        answers = api.rt.registry.answer_types()
        answer = await queries.signal_answer(conn, workflow_id, signal_id, answers, schema=api.schema)
    if answer is None:
        raise Problem(404, "Not found", f"no answer to {signal_id!r} of workflow {workflow_id!r} (yet)")
    [shown] = await opened(api, who, request, [(workflow_id, answer.model_dump(mode="json"))])
    return shown


@router.get("/v1/approvals", tags=["approvals"])
async def approvals(
    api: Api, who: Reader, request: Request, tier: Annotated[str | None, Query(max_length=MAX_ID)] = None
) -> dict[str, Any]:
    async with api.rt.pool.acquire() as conn:
        items = await queries.approval_tasks(conn, tier, schema=api.schema)
    body = ApprovalTasks(tier=tier, approvals=items).model_dump(mode="json")
    body["approvals"] = await opened(api, who, request, [(a["workflow_id"], a) for a in body["approvals"]])
    return body


@router.get("/v1/approvals/{approval_id}", tags=["approvals"])
async def approval(approval_id: Id, api: Api, who: Reader, request: Request) -> dict[str, Any]:
    return await one(api, queries.approval_view, approval_id, "approval", who, request)


@router.get("/v1/access", tags=["erasure"])
async def access_log(
    api: Api,
    who: Auditor,
    subject_ref: Annotated[str, Query(min_length=1, max_length=1024)],
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Reads of the subject's personal data, newest first (``chorus audit access``)."""
    hashed = subject_hash(as_keyed(api.settings.subject_key, subject_ref))
    async with api.rt.pool.acquire() as conn:
        found = await access.of_subject(conn, ledger=api.schema, subject_hash=hashed, limit=limit)
    return AccessLog(subject_hash=hashed, accesses=[AccessRead(**vars(a)) for a in found]).model_dump(
        mode="json"
    )


@router.post("/v1/erasures", status_code=202, tags=["erasure"])
async def erase(body: ErasureRequest, api: Api, who: Operator) -> JSONResponse:
    rt = api.rt
    announce = Announcer(rt.outbox, rt.producer)
    async with rt.pool.acquire() as conn:
        async with rt.outbox.transaction(conn) as tx:
            report = await erase_subject(
                tx,
                as_keyed(api.settings.subject_key, body.subject_ref),
                actor=who.principal,
                now=rt.clock.now(),
                announce=announce,
                ledger=api.schema,
            )
        found = await erasure(conn, report.erasure_id, ledger=api.schema)
    assert found is not None  # committed just now
    started = ErasureStarted(**found, workflows=report.workflows, **pending(api, found))
    return JSONResponse(
        started.model_dump(mode="json"),
        status_code=202,
        headers={"Location": f"/v1/erasures/{report.erasure_id}"},
    )


@router.get("/v1/erasures/{erasure_id}", tags=["erasure"])
async def erasure_status(erasure_id: Id, api: Api, who: Operator) -> dict[str, Any]:
    try:
        key = uuid.UUID(erasure_id)
    except ValueError:
        raise Problem(404, "Not found", f"no erasure {erasure_id!r} (erasure ids are UUIDs)") from None
    async with api.rt.pool.acquire() as conn:
        found = await erasure(conn, key, ledger=api.schema)
    if found is None:
        raise Problem(404, "Not found", f"no erasure {erasure_id!r}")
    return Erasure(**found, **pending(api, found)).model_dump(mode="json")


@router.post("/v1/replays", status_code=202, tags=["replay"], responses=problems(409))
async def replay(body: ReplayRequest, api: Api, who: Operator) -> JSONResponse:
    busy = api.replays.running()
    if busy is not None:
        detail = f"replay {busy.replay_id} is still running; follow it at /v1/replays/{busy.replay_id}"
        raise Problem(409, "A replay is running", detail, replay_id=busy.replay_id)
    job = api.replays.start(
        since=body.since, verify=body.verify, drop=body.drop, live_timeout_s=body.live_timeout_s
    )
    return JSONResponse(job.as_json(), status_code=202, headers={"Location": f"/v1/replays/{job.replay_id}"})


@router.get("/v1/replays/{replay_id}", tags=["replay"])
async def replay_job(replay_id: Id, api: Api, who: Operator) -> dict[str, Any]:
    job = api.replays.jobs.get(replay_id)
    if job is None:
        detail = f"no replay {replay_id!r} (jobs live in the projector process; was it restarted?)"
        raise Problem(404, "Not found", detail)
    return job.as_json()
