"""Signals and updates: a person's input to a running workflow (``workflows.yaml``'s
``signals``). POST /v1/workflows/{id}/signals/{name} states the signal's event on the
workflow's key (ordered with everything else that happens to it) and answers 202; POST
/v1/workflows/{id}/updates/{name} also waits, up to the signal's timeout, for the handling
service's answer as the read model shows it. One route per signal name, so the OpenAPI
document states each input."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from chorus.contracts.api.audit_projector import TimelineEntry, WorkflowStatusView
from chorus.contracts.api.gateway import (
    OfferedSignal,
    SignalAnswerView,
    SignalBody,
    SignalSent,
    WorkflowSignals,
    signal_input,
)
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import SIGNAL_FIELDS
from chorus.contracts.registry import Registry, SignalDeclaration
from chorus.kernel.outbox import OutboxTransaction
from chorus.kernel.service import RuntimeHandle
from chorus.platform.gateway.adapters import repository
from chorus.platform.gateway.adapters.readmodel import ReadModelUnavailableError
from chorus.platform.gateway.adapters.signals import SignalRow, find_signal, find_signal_by_key, insert_signal
from chorus.platform.gateway.domain import same_person
from chorus.platform.gateway.routes.deps import Anyone, Api, GatewayApi, IdempotencyKey, WorkflowId
from chorus.platform.gateway.routes.events import in_workflow
from chorus.platform.gateway.routes.workflows import readable
from chorus.web.apikeys import ApiKey
from chorus.web.webapi import Problem, api_router, problems

FIRST_POLL_S = 0.05
LAST_POLL_S = 1.0
"""An update asks the read model for its answer after 50 ms, then ever less often (doubling
to once a second): few reads for a slow answer, little delay for a quick one."""

SignalId = Path(max_length=200, description="the id a signal or update answered with")


def signal_router(registry: Registry) -> APIRouter:
    """A route per signal name (and per update: a signal with an answer), then the answers
    for names no type declares, and the reads."""
    router = api_router()
    updates = {
        name for workflow in registry.workflows.values() for name, s in workflow.signals.items() if s.answer
    }
    for name, event_type in sorted(registry.signal_names().items()):
        model = registry.latest_model(event_type)
        _route(router, name, model, as_update=False)
        if name in updates:
            _route(router, name, model, as_update=True)
    _unknown_names(router, sorted(registry.signal_names()))
    _reads(router)
    return router


def _route(router: APIRouter, name: str, model: type[EventModel], *, as_update: bool) -> None:
    async def send(
        workflow_id: WorkflowId, body: Any, who: Anyone, api: Api, idempotency_key: IdempotencyKey = None
    ) -> JSONResponse:
        return await _send(api, workflow_id, name, model, body, who, idempotency_key, as_update=as_update)

    send.__annotations__["body"] = SignalBody[signal_input(model)]  # type: ignore[misc]
    kind = "updates" if as_update else "signals"
    doc = (model.__doc__ or name).strip()
    router.post(
        f"/v1/workflows/{{workflow_id}}/{kind}/{name}",
        status_code=200 if as_update else 202,
        response_model=SignalSent,
        responses={
            202: {"description": "sent; an update: not answered within its timeout (GET status_url)"},
            **problems(403, 404, 409),
        },
        name=f"{'update' if as_update else 'signal'}_{name}",
        summary=f"Send {name} to a running workflow" + (", and wait for its answer" if as_update else ""),
        description=doc
        + (
            "\n\nAnswers 200 with the workflow's answer, or 202 when it did not come within the "
            "signal's timeout (the signal stands; GET status_url)."
            if as_update
            else "\n\nAnswers 202 at once; the workflow's answer, if it gives one, shows at status_url."
        )
        + " An Idempotency-Key makes a retry send it once.",
    )(send)


def _unknown_names(router: APIRouter, known: list[str]) -> None:
    """A name no workflow type declares: 404 naming those that exist (not the bare 404 of
    a path no route has)."""

    @router.post("/v1/workflows/{workflow_id}/signals/{name}", include_in_schema=False)
    @router.post("/v1/workflows/{workflow_id}/updates/{name}", include_in_schema=False)
    async def unknown(workflow_id: WorkflowId, name: str, who: Anyone) -> None:
        raise Problem(404, "No such signal", f"no workflow type takes {name[:100]!r}; signals: {known}")


def _reads(router: APIRouter) -> None:
    @router.get("/v1/workflows/{workflow_id}/signals", responses=problems(404))
    async def offered(workflow_id: WorkflowId, who: Anyone, api: Api) -> WorkflowSignals:
        """What the caller may send this workflow now (none once it ended), each with its
        input's JSON Schema."""
        view, accepted = await readable(api, workflow_id, who, "signals")
        workflow_type = _type_of(view, accepted)
        signals: list[OfferedSignal] = []
        ended = view is not None and view.outcome is not None
        for name, declared in sorted(api.rt.registry.signals(workflow_type).items()):
            if ended or _refusal(declared, who, view, accepted) is not None:
                continue
            model = api.rt.registry.latest_model(declared.event)
            signals.append(
                OfferedSignal(
                    name=name,
                    event_type=declared.event,
                    roles=list(declared.roles),
                    update=declared.answer is not None,
                    timeout_s=declared.timeout_s if declared.answer else None,
                    description=(model.__doc__ or "").strip().replace("``", ""),
                    input_schema=signal_input(model).model_json_schema(),
                )
            )
        return WorkflowSignals(workflow_id=workflow_id, workflow_type=workflow_type, signals=signals)

    @router.get("/v1/signals/{signal_id}", responses=problems(404))
    async def sent(signal_id: str = SignalId, *, who: Anyone, api: Api) -> SignalSent:
        """A signal or update: when it was sent, and the workflow's answer once it gave one.
        Whoever may read its workflow may read it."""
        async with api.rt.pool.acquire() as conn:
            row = await find_signal(conn, signal_id)
        if row is None:
            raise Problem(404, "Unknown signal", f"no signal {signal_id!r}")
        try:
            await readable(api, row.workflow_id, who, "signal")
        except Problem:
            raise Problem(404, "Unknown signal", f"no signal {signal_id!r}") from None
        answer = await api.reads.signal_answer(row.workflow_id, signal_id, for_whom=who.principal)
        return _answer(api, row, answer)


def _type_of(view: WorkflowStatusView | None, accepted: repository.SubmissionRow | None) -> str:
    if view is not None and view.workflow_type:
        return view.workflow_type
    assert accepted is not None  # readable: one of the two
    return accepted.workflow_type


def _refusal(
    declared: SignalDeclaration,
    who: ApiKey,
    view: WorkflowStatusView | None,
    accepted: repository.SubmissionRow | None,
) -> str | None:
    """Why ``who`` may not send it (None: it may). A submitter sends to its own workflows
    only; a reviewer to those whose approval waits on its tier now, never to one it
    submitted (with another key of theirs)."""
    submitter = accepted.submitter if accepted else None
    if who.role not in declared.roles:
        return f"only {' or '.join(declared.roles)} may send it, not a {who.role}"
    if who.role == "submitter" and not same_person(submitter, who.principal):
        return "a submitter sends it to its own workflows only"
    if who.role == "reviewer":
        waits_on = view.pending_approval.tier if view is not None and view.pending_approval else None
        if waits_on is None or waits_on != who.tier or same_person(submitter, who.principal):
            return (
                "a reviewer sends it while the workflow's approval waits on their tier, to others' workflows"
            )
    return None


async def _send(
    api: GatewayApi,
    workflow_id: str,
    name: str,
    model: type[EventModel],
    body: SignalBody[Any],
    who: ApiKey,
    idempotency_key: str | None,
    *,
    as_update: bool,
) -> JSONResponse:
    view, accepted = await readable(api, workflow_id, who, f"signal {name}")
    workflow_type = _type_of(view, accepted)
    offered = api.rt.registry.signals(workflow_type)
    declared = offered.get(name)
    if declared is None:
        raise Problem(
            404,
            "No such signal",
            f"a {workflow_type} workflow takes no {name!r}; it takes: {sorted(offered)}",
        )
    if as_update and declared.answer is None:
        raise Problem(
            404, "No such update", f"{name} of a {workflow_type} workflow has no answer: send it as a signal"
        )
    refused = _refusal(declared, who, view, accepted)
    if refused is not None:
        raise Problem(403, "Forbidden", f"{name} of workflow {workflow_id}: {refused}")
    digest = hashlib.sha256(
        json.dumps([workflow_id, name, as_update, body.model_dump(mode="json")], sort_keys=True).encode()
    ).hexdigest()
    signalled = Signalled(
        workflow_id,
        workflow_type,
        accepted,
        name,
        model,
        body.input.model_dump(mode="json"),
        who.principal,
        body.reason,
    )
    async with api.rt.pool.acquire() as conn:
        row = await find_signal_by_key(conn, who.principal, idempotency_key) if idempotency_key else None
        replayed = row is not None
        if row is None:
            if view is not None and view.outcome is not None:
                raise Problem(
                    409, "Already ended", f"workflow {workflow_id} ended ({view.outcome}): nothing to signal"
                )
            row, replayed = await _record(api, conn, signalled, idempotency_key, digest, as_update=as_update)
    if row.request_hash != digest:
        raise Problem(409, "Idempotency key reused", "this Idempotency-Key was used for a different request")
    if as_update:
        answer = await _wait_for_answer(api, row, declared.timeout_s, who)
    else:
        answer = (
            await api.reads.signal_answer(workflow_id, row.signal_id, for_whom=who.principal)
            if replayed
            else None
        )
    sent = _answer(api, row, answer)
    return JSONResponse(
        sent.model_dump(mode="json"),
        status_code=200 if as_update and answer is not None else 202,
        headers={"Location": sent.status_url, **({"Idempotent-Replayed": "true"} if replayed else {})},
    )


async def _record(
    api: GatewayApi,
    conn: asyncpg.Connection,
    signalled: Signalled,
    idempotency_key: str | None,
    request_hash: str,
    *,
    as_update: bool,
) -> tuple[SignalRow, bool]:
    """The signal's row and its event, in one transaction: (row, False); or the row of the
    concurrent retry with the same key that won, (row, True)."""
    try:
        async with api.rt.outbox.transaction(conn) as tx:
            row = await signal_in(
                tx,
                api.rt,
                signalled,
                idempotency_key=idempotency_key,
                request_hash=request_hash,
                as_update=as_update,
            )
    except ValidationError as exc:  # the input's model is the event's: only a project's own validator says no
        errors = [{"pointer": _pointer(e["loc"]), "message": e["msg"]} for e in exc.errors()]
        raise Problem(
            422, "Invalid signal", f"{signalled.name}: {exc.errors()[0]['msg']}", errors=errors
        ) from None
    if row is not None:
        return row, False
    assert idempotency_key is not None  # only a key's unique index makes an insert lose
    winner = await find_signal_by_key(conn, signalled.sent_by, idempotency_key)
    assert winner is not None
    return winner, True


@dataclass(frozen=True)
class Signalled:
    """A signal to send: to which workflow (its type, its submission: trace, lane, pins),
    which one, its input (JSON), from whom and why."""

    workflow_id: str
    workflow_type: str
    submission: repository.SubmissionRow | None
    name: str
    model: type[EventModel]
    input: dict[str, Any]
    sent_by: str
    reason: str


async def signal_in(
    tx: OutboxTransaction,
    rt: RuntimeHandle,
    signalled: Signalled,
    *,
    idempotency_key: str | None,
    request_hash: str,
    as_update: bool = False,
) -> SignalRow | None:
    """The signal's row and its event in the caller's transaction ``tx`` (a person's request,
    a bulk action's item); None when the sender's ``idempotency_key`` was used before.
    ValidationError when the input does not make the event."""
    signal_id = f"sig-{uuid.uuid4().hex}"
    now = rt.clock.now()
    stated = {
        **signalled.input,
        "signal_id": signal_id,
        "sent_by": signalled.sent_by,
        "reason": signalled.reason,
    }
    event = signalled.model.model_validate_json(json.dumps(stated))
    envelope = in_workflow(
        rt,
        event,
        signalled.workflow_id,
        signalled.workflow_type,
        signalled.submission,
        f"signal:{signal_id}",
        now,
    )
    row = SignalRow(
        signal_id, signalled.workflow_id, signalled.name, signalled.sent_by, request_hash, as_update, now
    )
    if not await insert_signal(tx.conn, row, idempotency_key):
        return None
    await tx.publish(envelope)
    return row


def _pointer(loc: tuple[int | str, ...]) -> str:
    """Where in the request body an error of the signal's event is: its input, or the reason
    (the fields the gateway fills in come from the caller's reason alone)."""
    if loc and loc[0] in SIGNAL_FIELDS:
        return "/reason"
    return "/input/" + "/".join(map(str, loc))


async def _wait_for_answer(
    api: GatewayApi, row: SignalRow, timeout_s: float, who: ApiKey
) -> TimelineEntry | None:
    """The answer from the read model, once it comes within ``timeout_s``; None when it did
    not, or the read model could not say (the signal stands either way: 202)."""
    clock = api.rt.clock
    deadline = clock.now() + timedelta(seconds=timeout_s)
    pause = FIRST_POLL_S
    while True:
        try:
            answer = await api.reads.signal_answer(row.workflow_id, row.signal_id, for_whom=who.principal)
        except ReadModelUnavailableError:
            return None
        left = (deadline - clock.now()).total_seconds()
        if answer is not None or left <= 0:
            return answer
        await clock.sleep(min(pause, left))
        pause = min(pause * 2, LAST_POLL_S)


def _answer(api: GatewayApi, row: SignalRow, answer: TimelineEntry | None) -> SignalSent:
    shown = None
    if answer is not None:
        shown = SignalAnswerView(
            accepted=bool(answer.payload.get("accepted")),
            detail=str(answer.payload.get("detail", "")),
            event_type=answer.event_type,
            answered_at=answer.occurred_at,
            payload=answer.payload,
        )
    return SignalSent(
        signal_id=row.signal_id,
        workflow_id=row.workflow_id,
        name=row.name,
        update=row.as_update,
        status="answered" if shown is not None else "sent",
        sent_by=row.sent_by,
        sent_at=row.sent_at,
        answer=shown,
        status_url=f"{api.base_url}/v1/signals/{row.signal_id}",
    )
