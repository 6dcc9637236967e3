"""POST /v1/workflows/{type}: one route per workflow type (so the OpenAPI document states
each type's input); 202 with the workflow's id at once, the work runs in the agents."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import Field, create_model

from chorus.base.errors import EventTooLargeError
from chorus.base.tracing import annotate, request_span
from chorus.contracts.api.gateway import Submission, SubmissionAccepted
from chorus.contracts.base import plain_input
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import WorkflowDeadlineReached, WorkflowStarted
from chorus.contracts.platform import TimerSchedule
from chorus.kernel.envelopes import child_envelope, start_envelope
from chorus.kernel.outbox import fire_target, outbox_message
from chorus.kernel.service import RuntimeHandle
from chorus.kernel.store import OutboxMessage
from chorus.outside.egress import EgressRefusedError, check_egress
from chorus.platform.gateway.adapters import repository
from chorus.platform.gateway.domain import WorkflowType as WorkflowKind
from chorus.platform.gateway.domain import request_hash, submitter_urls
from chorus.platform.gateway.routes.deps import Api, GatewayApi, IdempotencyKey, Submitter, Traceparent
from chorus.privacy.crypto import keyed_ref
from chorus.web.apikeys import ApiKey
from chorus.web.webapi import Problem, api_router, problems


def submit_router(kinds: Mapping[str, WorkflowKind]) -> APIRouter:
    """A route per workflow type, each taking that type's submission."""
    router = api_router()
    for name, kind in kinds.items():
        _submit_route(router, name, kind)
    return router


def _submit_route(router: APIRouter, name: str, kind: WorkflowKind) -> None:
    longest_s = kind.deadline_s

    async def submit_workflow(
        body: Any,
        who: Submitter,
        idempotency_key: IdempotencyKey = None,
        traceparent: Traceparent = None,
        *,
        api: Api,
    ) -> JSONResponse:
        # Accepting is the workflow's first span: a child of the caller's trace, if any.
        route = f"/v1/workflows/{name}"
        with request_span("gateway", f"accept {name}", traceparent, method="POST", route=route) as accepted:
            answer = await accept(api, Asked(name, kind, body, who, idempotency_key, accepted))
            annotate({"http.response.status_code": answer.status_code})
            return answer

    # The body's model is this type's (FastAPI reads it from the annotation), with its
    # longest deadline as the bound of a shorter one asked for (422 naming /deadline_s).
    # Its input takes personal data in clear only (a sealed-looking value is a 422).
    start: Any = plain_input(kind.start)
    model = create_model(
        f"{name.title().replace('_', '')}Submission",
        __base__=Submission[start],
        deadline_s=(
            float | None,
            Field(
                default=None,
                gt=0,
                le=longest_s,
                description=f"seconds from acceptance until the workflow times out (at most and by "
                f"default {longest_s:g}, this type's deadline)",
            ),
        ),
    )
    submit_workflow.__annotations__["body"] = model
    router.post(
        f"/v1/workflows/{name}",
        status_code=202,
        responses=problems(409),
        name=f"submit_{name}",
        summary=f"Start a {name} workflow",
        description="Answers 202 with the workflow's id at once; the work runs in the agent services. "
        "An Idempotency-Key makes retries safe (409 when it was used for a different request).",
    )(submit_workflow)


@dataclass(frozen=True)
class Asked:
    """A submission as it arrived: its workflow type, body, caller, Idempotency-Key and the
    span accepting it."""

    workflow_type: str
    kind: WorkflowKind
    body: Submission[Any]
    who: ApiKey
    idempotency_key: str | None
    traceparent: str | None
    subject_keyed: str | None = None
    """The subject's keyed reference when the caller has only that (a schedule keeps no
    other); else the body's subject_ref is keyed here."""


async def accept(api: GatewayApi, asked: Asked) -> JSONResponse:
    """The submission accepted once (a retry with its key answers with the same workflow):
    202 with the workflow's id."""
    await refuse_inner_urls(asked.body.model_dump(mode="json"))
    digest = request_hash(asked.workflow_type, asked.body)
    workflow_id, existing = await begin(api.rt, api.settings.subject_key, asked, digest)
    if existing is not None:
        return _replayed(api, existing, digest)
    status_url = api.status_url(workflow_id)
    return JSONResponse(
        SubmissionAccepted(workflow_id=workflow_id, status_url=status_url).model_dump(mode="json"),
        status_code=202,
        headers={"Location": status_url},
    )


async def begin(
    rt: RuntimeHandle, subject_key: str, asked: Asked, digest: str | None = None
) -> tuple[str, repository.SubmissionRow | None]:
    """The submission's row and the outbox rows of its first events, in one transaction:
    (its workflow id, None); or, when its Idempotency-Key was used before (a retry, a
    concurrent one that won), (that workflow's id, its row). A person's request (accept)
    and a schedule's run (chorus.platform.gateway.scheduled) start workflows alike."""
    body, who, idempotency_key = asked.body, asked.who, asked.idempotency_key
    digest = digest or request_hash(asked.workflow_type, body)
    async with rt.pool.acquire() as conn:
        if idempotency_key:
            existing = await repository.find_by_key(conn, who.principal, idempotency_key)
            if existing is not None:
                return existing.workflow_id, existing
        workflow_id = f"wf-{uuid.uuid4().hex[:20]}"
        now = rt.clock.now()
        started, messages = await _first_events(rt, subject_key, asked, workflow_id, now)
        async with rt.outbox.transaction(conn) as tx:
            inserted = await repository.insert_submission(
                conn,
                workflow_id=workflow_id,
                workflow_type=asked.workflow_type,
                submitter=who.principal,
                idempotency_key=idempotency_key,
                request_hash=digest,
                callback_url=body.callback_url,
                now=now,
                priority=body.priority,
                traceparent=started.traceparent,
                pins=json.dumps(started.pins) if started.pins else None,
            )
            if inserted:
                tx.publish_messages(messages)
        if not inserted:  # a concurrent retry with the same key won the race
            assert idempotency_key is not None
            winner = await repository.find_by_key(conn, who.principal, idempotency_key)
            assert winner is not None
            return winner.workflow_id, winner
    return workflow_id, None


async def _first_events(
    rt: RuntimeHandle, subject_key: str, asked: Asked, workflow_id: str, now: datetime
) -> tuple[Envelope, list[OutboxMessage]]:
    """workflow.started, the start event (the submission's input) and the deadline timer,
    as outbox rows; and the started envelope (its trace and pins go on the row)."""
    body, who, kind, workflow_type = asked.body, asked.who, asked.kind, asked.workflow_type
    deadline_at = now + timedelta(seconds=body.deadline_s or kind.deadline_s)
    started = start_envelope(
        WorkflowStarted(
            submitted_by=who.principal,
            start_event_type=kind.start.event_type,
            callback_url=body.callback_url,
            deadline_at=deadline_at,
            submitter_ref=keyed_ref(subject_key, who.principal),
            business_key=asked.idempotency_key,
        ),
        workflow_id=workflow_id,
        workflow_type=workflow_type,
        producer=rt.producer,
        now=now,
        idempotency_key=envelope_idempotency_key(who.principal, asked.idempotency_key or workflow_id),
        priority=body.priority,
        traceparent=asked.traceparent,  # the accepting request's span (submit_workflow)
        deadline=deadline_at,
        subject_ref=asked.subject_keyed
        or (keyed_ref(subject_key, body.subject_ref) if body.subject_ref else None),
        # Each service with a rollout: the release this workflow stays on to its end.
        pins=rt.rollouts.pins(workflow_type, workflow_id),
    )
    # A microsecond after workflow.started, so timelines show the start first.
    first = child_envelope(
        started,
        body.input,
        producer=rt.producer,
        now=now + timedelta(microseconds=1),
        position="start",
        traceparent=started.traceparent,  # both made by the accepting request's span
    )
    deadline_timer = _deadline_timer(rt, started, deadline_at, now)
    return started, await outbox_messages(rt, [(started, ""), (first, "/input"), (deadline_timer, "")])


async def refuse_inner_urls(body: Any) -> None:
    """Every URL the workflow will call (its callback, a delivery target, sources) must lead
    outside the deployment's network: a 403 naming the field, before anything is accepted.
    The services check again when they call (an address can change after this)."""
    for where, url in submitter_urls(body):
        try:
            await check_egress(url)
        except EgressRefusedError as exc:
            # 403, not 422: the URL is well formed; the submitter may not point Chorus there.
            errors = [{"pointer": where, "message": str(exc)}]
            raise Problem(403, "Forbidden target", f"{where}: {exc}", errors=errors) from None


def envelope_idempotency_key(principal: str, key: str) -> str:
    """The key on the workflow's events: per caller, within the envelope's 200 characters
    (a long key is replaced by its digest, the same on every retry)."""
    candidate = f"{principal}:{key}"
    if len(candidate) <= 200:
        return candidate
    return f"{principal[:100]}:sha256:{hashlib.sha256(candidate.encode()).hexdigest()}"


async def outbox_messages(rt: RuntimeHandle, envelopes: list[tuple[Envelope, str]]) -> list[OutboxMessage]:
    """Outbox rows for the submission's events, their personal data sealed (the gateway is
    where it enters); 413 naming the field when one is too large."""
    messages = []
    for envelope, prefix in envelopes:
        try:
            messages.append(outbox_message(rt.registry, await rt.sealer.seal(envelope), rt.signer))
        except EventTooLargeError as exc:
            where = prefix + (exc.pointer or "").removeprefix("/payload") if exc.pointer else "/"
            raise Problem(
                413,
                "Content too large",
                f"{where}: the {envelope.event_type} event for this request would be {exc.size:,} bytes, "
                f"more than the {exc.limit:,} its topic takes",
                errors=[{"pointer": where, "message": str(exc)}],
            ) from None
    return messages


def _replayed(api: GatewayApi, existing: repository.SubmissionRow, digest: str) -> JSONResponse:
    if existing.request_hash != digest:
        raise Problem(409, "Idempotency key reused", "this Idempotency-Key was used for a different request")
    status_url = api.status_url(existing.workflow_id)
    return JSONResponse(
        SubmissionAccepted(workflow_id=existing.workflow_id, status_url=status_url).model_dump(mode="json"),
        status_code=202,
        headers={"Location": status_url, "Idempotent-Replayed": "true"},
    )


def _deadline_timer(rt: RuntimeHandle, started: Envelope, deadline_at: datetime, now: datetime) -> Envelope:
    fired = child_envelope(
        started,
        WorkflowDeadlineReached(deadline_at=deadline_at),
        producer=rt.producer,
        now=deadline_at,  # when it occurs: the gateway states (and signs) it now
        position="deadline",
        traceparent=started.traceparent,  # made by the accepting request's span, as the rest
    )
    command = TimerSchedule(
        timer_id=f"gateway:{started.workflow_id}:deadline",
        due_at=deadline_at,
        fire=fire_target(rt.registry, fired, rt.signer),
        purpose="deadline",
    )
    return child_envelope(
        started,
        command,
        producer=rt.producer,
        now=now,
        position="deadline-timer",
        traceparent=started.traceparent,
    )
