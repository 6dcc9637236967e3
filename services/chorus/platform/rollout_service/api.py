"""The operator API of rollouts (beside /health and /metrics; OpenAPI at /openapi.json).

GET  /v1/rollouts                      every service's policy
GET  /v1/rollouts/{service}            its policy, each release side by side (in-flight
                                       workflows, completion and failure rates, failures
                                       by category, p50/p99 step latency), its history
POST /v1/rollouts/{service}/start      {"canary", "percent", "stable"?, "workflow_types"?,
                                        "auto_rollback"?, "reason"?}
POST /v1/rollouts/{service}/set        {"percent", "reason"?}   shift the canary's share
POST /v1/rollouts/{service}/promote    {"reason"?}   new workflows go to the canary release
POST /v1/rollouts/{service}/rollback   {"reason"?}   new workflows go back to stable
GET  /v1/rollouts/{service}/workflows?release=R   in-flight workflows pinned to R
POST /v1/rollouts/{service}/workflows/{workflow_id}/repin   {"to", "reason"}   202: move an
                                       in-flight workflow to another release (the owning
                                       release answers; chorus.releases.repin)
GET  /v1/rollouts/{service}/repins[/{request_id}]   moves asked for, and their answers

Reads for operators and auditors, changes for operators; the change's actor is the key's
principal. A change that does not apply is a 409 (nothing running to promote) or a 422
naming the field; the service name is checked against the registry (404 otherwise).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from chorus.contracts.api.rollout_service import (
    InFlight,
    PolicyChanged,
    ReasonBody,
    Repin,
    RepinAsked,
    RepinBody,
    Repins,
    Rollouts,
    RolloutState,
    SetBody,
    StartBody,
)
from chorus.contracts.rollouts import RolloutAction
from chorus.kernel.service import RuntimeHandle
from chorus.platform.rollout_service.adapters import repository as repo
from chorus.platform.rollout_service.changes import make_change, request_repin
from chorus.platform.rollout_service.domain import Change, ChangeRefused
from chorus.web.apikeys import ApiKey, role
from chorus.web.typedclient import bound, provided
from chorus.web.webapi import Problem, api_router, problems

Reader = Annotated[ApiKey, Depends(role("operator", "auditor"))]
Operator = Annotated[ApiKey, Depends(role("operator"))]
Runtime = Annotated[RuntimeHandle, Depends(provided("rt", RuntimeHandle))]


WorkflowId = Annotated[str, Path(min_length=1, max_length=200)]


def _refused(service: str, exc: ChangeRefused) -> Problem:
    if exc.pointer is not None:
        return Problem(
            exc.status,
            "Invalid request",
            f"{exc.pointer}: {exc.message}",
            errors=[{"pointer": exc.pointer, "message": exc.message}],
        )
    return Problem(exc.status, "Rollout change refused", exc.message, service=service)


router = api_router(tags=["rollouts"], responses=problems(401, 403, 404, 409, 415, 422))


def routes(rt: RuntimeHandle) -> APIRouter:
    """The rollout API over the policies of the service ``rt`` runs."""
    return bound(router, rt=rt)


def known(rt: RuntimeHandle, service: str) -> str:
    """``service``, when the registry has it (404 otherwise)."""
    if service not in rt.registry.principals.services:
        raise Problem(404, "Unknown service", f"no service {service!r} in the registry", service=service)
    return service


async def change(rt: RuntimeHandle, service: str, body: Change) -> dict[str, Any]:
    try:
        changed = await make_change(rt, known(rt, service), body)
    except ChangeRefused as exc:
        raise _refused(service, exc) from None
    return PolicyChanged(policy=changed).model_dump(mode="json")


@router.get("/v1/rollouts", summary="Every service's rollout policy")
async def list_rollouts(who: Reader, rt: Runtime) -> dict[str, Any]:
    async with rt.pool.acquire() as conn:
        found = await repo.policies(conn)
    return Rollouts(rollouts=found).model_dump(mode="json")


@router.get("/v1/rollouts/{service}", summary="A service's releases side by side, and its history")
async def status(service: str, who: Reader, rt: Runtime) -> dict[str, Any]:
    known(rt, service)
    s = rt.settings
    async with rt.pool.acquire() as conn:
        current = await repo.policy(conn, service)
        releases = await repo.release_status(
            conn,
            service,
            current,
            now=rt.clock.now(),
            running_within=timedelta(seconds=s.running_within_s),
            latency_window=timedelta(seconds=s.latency_window_s),
        )
        changes = await repo.history(conn, service)
        moves = await repo.repins(conn, service, limit=20)
    return RolloutState.model_validate(
        {
            "service": service,
            "policy": current,
            "releases": [r.as_json() for r in releases],
            "history": changes,
            "repins": moves,
        }
    ).model_dump(mode="json")


@router.get("/v1/rollouts/{service}/workflows", summary="In-flight workflows pinned to a release")
async def pinned(
    service: str,
    who: Reader,
    release: Annotated[str, Query(min_length=1, max_length=64)],
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    *,
    rt: Runtime,
) -> dict[str, Any]:
    known(rt, service)
    async with rt.pool.acquire() as conn:
        found = await repo.in_flight(conn, service, release)
    return InFlight(service=service, release=release, count=len(found), workflows=found[:limit]).model_dump(
        mode="json"
    )


@router.post(
    "/v1/rollouts/{service}/workflows/{workflow_id}/repin",
    summary="Move an in-flight workflow to another release",
    status_code=202,
)
async def move(
    service: str, workflow_id: WorkflowId, body: RepinBody, who: Operator, rt: Runtime
) -> dict[str, Any]:
    known(rt, service)
    try:
        request_id = await request_repin(rt, service, workflow_id, body.to, who.principal, body.reason)
    except ChangeRefused as exc:
        raise _refused(service, exc) from None
    asked = RepinAsked(
        request_id=str(request_id), status="pending", location=f"/v1/rollouts/{service}/repins/{request_id}"
    )
    return asked.model_dump(mode="json")


@router.get("/v1/rollouts/{service}/repins", summary="Moves asked for, newest first, and their answers")
async def list_repins(service: str, who: Reader, rt: Runtime) -> dict[str, Any]:
    known(rt, service)
    async with rt.pool.acquire() as conn:
        found = await repo.repins(conn, service)
    return Repins.model_validate({"service": service, "repins": found}).model_dump(mode="json")


@router.get("/v1/rollouts/{service}/repins/{request_id}", summary="One move and its answer")
async def one_repin(service: str, request_id: uuid.UUID, who: Reader, rt: Runtime) -> dict[str, Any]:
    known(rt, service)
    async with rt.pool.acquire() as conn:
        found = await repo.repin(conn, service, request_id)
    if found is None:
        raise Problem(404, "Unknown request", f"no move {request_id} of {service}", service=service)
    return Repin.model_validate(found).model_dump(mode="json")


@router.post("/v1/rollouts/{service}/start", summary="Start a canary")
async def start(service: str, body: StartBody, who: Operator, rt: Runtime) -> dict[str, Any]:
    return await change(
        rt,
        service,
        Change(
            "start",
            who.principal,
            reason=body.reason,
            stable=body.stable,
            canary=body.canary,
            percent=body.percent,
            workflow_types=tuple(body.workflow_types),
            auto_rollback=body.auto_rollback,
        ),
    )


@router.post("/v1/rollouts/{service}/set", summary="Shift the canary's share")
async def shift(service: str, body: SetBody, who: Operator, rt: Runtime) -> dict[str, Any]:
    return await change(rt, service, Change("set", who.principal, reason=body.reason, percent=body.percent))


async def _simple(
    action: RolloutAction, service: str, who: ApiKey, body: ReasonBody | None, rt: RuntimeHandle
) -> dict[str, Any]:
    return await change(rt, service, Change(action, who.principal, reason=body.reason if body else None))


# Both named "act", as their operation ids have always been.
@router.post("/v1/rollouts/{service}/promote", summary="New workflows go to the canary release", name="act")
async def promote(
    service: str, who: Operator, body: ReasonBody | None = None, *, rt: Runtime
) -> dict[str, Any]:
    return await _simple("promote", service, who, body, rt)


@router.post("/v1/rollouts/{service}/rollback", summary="New workflows go back to stable", name="act")
async def rollback(
    service: str, who: Operator, body: ReasonBody | None = None, *, rt: Runtime
) -> dict[str, Any]:
    return await _simple("rollback", service, who, body, rt)
