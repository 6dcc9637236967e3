"""The HTTP API (FastAPI; its OpenAPI document is served at /openapi.json).

Accept-and-resume: POST answers 202 with a workflow id at once; the work runs in
the agent services. Reads come from the audit projection. Every error is
``application/problem+json`` naming what is wrong.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal, cast

from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException

from chorus.base.errors import EventTooLargeError
from chorus.base.logs import fields
from chorus.base.tracing import request_span
from chorus.kernel.envelopes import child_envelope, start_envelope
from chorus.kernel.outbox import outbox_message
from chorus.kernel.service import RuntimeHandle
from chorus.kernel.store import OutboxMessage
from chorus.outside.egress import EgressRefusedError, check_egress
from chorus.outside.ratelimit import KeyedRateLimits
from chorus.privacy.crypto import keyed_ref
from chorus.web.apikeys import ApiKey, caller, role
from chorus.web.webapi import Problem, QueryDateTime, create_api, problem_response, problems
from chorus_contracts.approvals import ApprovalDecisionSubmitted, ApprovalPolicyChange
from chorus_contracts.base import EventModel, plain_input
from chorus_contracts.envelope import Envelope, Priority
from chorus_contracts.lifecycle import (
    WorkflowCancelRequested,
    WorkflowDeadlineReached,
    WorkflowStarted,
    WorkflowStatus,
)
from chorus_contracts.platform import FireTarget, TimerSchedule
from gateway.adapters import repository
from gateway.adapters.policy import ApprovalPolicyApi, PolicyApiUnavailableError
from gateway.adapters.readmodel import ReadModel, ReadModelUnavailableError
from gateway.config import Settings
from gateway.domain import (
    CURSOR_PATTERN,
    IDEMPOTENCY_KEY_MAX,
    IDEMPOTENCY_KEY_PATTERN,
    CancelBody,
    DecisionBody,
    Submission,
    WorkflowPage,
    may_read,
    request_hash,
    same_person,
    submitter_urls,
    workflow_types,
)
from gateway.domain import WorkflowType as WorkflowKind

log = logging.getLogger("gateway.api")


# -- authentication (module level: FastAPI resolves these annotations from module globals) --


async def principal(request: Request, who: Annotated[ApiKey, Depends(caller)]) -> ApiKey:
    """The caller (:func:`chorus.web.apikeys.caller`); 429 with Retry-After when its key used
    up its rate (shared by every gateway replica)."""
    limits: KeyedRateLimits = request.app.state.limits
    granted = await limits.try_acquire(who.principal)
    if not granted.ok:
        retry_after = max(1, math.ceil(granted.wait_s))
        raise Problem(
            429,
            "Too many requests",
            f"{who.principal} exceeded its rate; retry in {retry_after} s",
            headers={"Retry-After": str(retry_after)},
        )
    return who


SubmitterOrOperator = Annotated[ApiKey, Depends(role("submitter", "operator", who=principal))]
Reviewer = Annotated[ApiKey, Depends(role("reviewer", who=principal))]
ReviewerOrOperator = Annotated[ApiKey, Depends(role("reviewer", "operator", who=principal))]
Operator = Annotated[ApiKey, Depends(role("operator", who=principal))]
OperatorOrAuditor = Annotated[ApiKey, Depends(role("operator", "auditor", who=principal))]
Anyone = Annotated[ApiKey, Depends(principal)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        max_length=IDEMPOTENCY_KEY_MAX,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="Makes a retried POST safe: the same key (per caller) answers with the same "
        "workflow. Printable ASCII, at most 255 characters.",
    ),
]
Traceparent = Annotated[str | None, Header(max_length=55, description="W3C trace context to continue")]
WorkflowId = Annotated[str, Path(max_length=200, description="the id the submission answered with")]
ApprovalId = Annotated[str, Path(max_length=200)]


def create_app(rt: RuntimeHandle, settings: Settings, reads: ReadModel, policy: ApprovalPolicyApi) -> FastAPI:
    """The API; ``reads`` answers what it says about workflows and approvals (the audit
    projector's read API), ``policy`` manages the approval policy (the approval gate's)."""
    app = create_api(
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.api_body_timeout_s,
        title="Chorus gateway",
        version="1.0.0",
        description="Submit long-running agent workflows, watch them, approve them.",
        responses=problems(400, 401, 403, 413, 422, 429, 503),
    )

    @app.exception_handler(ReadModelUnavailableError)
    @app.exception_handler(PolicyApiUnavailableError)
    async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
        return problem_response(
            503, "Read model unavailable", str(exc), request.url.path, headers={"Retry-After": "5"}
        )

    app.state.settings = settings
    app.state.api_keys = settings.api_keys
    app.state.limits = KeyedRateLimits(
        rt.pool, "api", rate_per_s=settings.api_rate_per_s, burst=settings.api_burst, clock=rt.clock
    )
    base_url = settings.public_url or f"http://{settings.api_host}:{settings.api_port}"

    kinds = workflow_types(rt.registry, settings.deadlines_s)
    _submit_routes(app, rt, settings, kinds, base_url)
    _unknown_type_answer(app, sorted(kinds))
    _watch_routes(app, rt, settings, reads, base_url)
    _approval_routes(app, rt, reads)
    _policy_routes(app, policy)
    return app


def _submit_routes(
    app: FastAPI, rt: RuntimeHandle, settings: Settings, kinds: Mapping[str, WorkflowKind], base_url: str
) -> None:
    """POST /v1/workflows/{type}: one route per workflow type; 202 with the workflow's id."""

    async def submit(
        workflow_type: str,
        kind: WorkflowKind,
        body: Submission[Any],
        who: ApiKey,
        idempotency_key: str | None,
        traceparent: str | None,
    ) -> JSONResponse:
        await refuse_inner_urls(body.model_dump(mode="json"))
        digest = request_hash(workflow_type, body)
        async with rt.pool.acquire() as conn:
            if idempotency_key:
                existing = await repository.find_by_key(conn, who.principal, idempotency_key)
                if existing is not None:
                    return _replayed(existing, digest, base_url)
            workflow_id = f"wf-{uuid.uuid4().hex[:20]}"
            now = rt.clock.now()
            deadline_at = now + timedelta(seconds=body.deadline_s or kind.deadline_s)
            started = start_envelope(
                WorkflowStarted(
                    submitted_by=who.principal,
                    start_event_type=kind.start.event_type,
                    callback_url=body.callback_url,
                    deadline_at=deadline_at,
                    submitter_ref=keyed_ref(settings.subject_key, who.principal),
                    business_key=idempotency_key,
                ),
                workflow_id=workflow_id,
                workflow_type=workflow_type,
                producer=rt.producer,
                now=now,
                idempotency_key=envelope_idempotency_key(who.principal, idempotency_key or workflow_id),
                priority=body.priority,
                traceparent=traceparent,  # the accepting request's span (_submit_route)
                deadline=deadline_at,
                subject_ref=keyed_ref(settings.subject_key, body.subject_ref) if body.subject_ref else None,
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
            messages = await _messages(rt, [(started, ""), (first, "/input"), (deadline_timer, "")])
            async with rt.outbox.transaction(conn) as tx:
                inserted = await repository.insert_submission(
                    conn,
                    workflow_id=workflow_id,
                    workflow_type=workflow_type,
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
                return _replayed(winner, digest, base_url)
        status_url = f"{base_url}/v1/workflows/{workflow_id}"
        return JSONResponse(
            {"workflow_id": workflow_id, "status_url": status_url, "status": "accepted"},
            status_code=202,
            headers={"Location": status_url},
        )

    # One route per workflow type, so the OpenAPI document states each type's input.
    for name, kind in kinds.items():
        _submit_route(app, name, kind, submit)


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


def _unknown_type_answer(app: FastAPI, known: list[str]) -> None:
    """POST to a type that does not exist is a 405 (the path is a workflow's, for GET),
    with the types that do exist in the answer."""
    answer_http_error = app.exception_handlers[StarletteHTTPException]

    @app.exception_handler(StarletteHTTPException)
    async def _unknown_type(request: Request, exc: StarletteHTTPException) -> Response:
        path = request.url.path
        if exc.status_code == 405 and request.method == "POST" and path.startswith("/v1/workflows/"):
            asked = path.removeprefix("/v1/workflows/")[:100]
            detail = f"no workflow type {asked!r} to start; known: {known}"
            return problem_response(405, "Method Not Allowed", detail, path, headers=exc.headers)
        response = answer_http_error(request, exc)
        return await response if inspect.isawaitable(response) else response


def _watch_routes(
    app: FastAPI, rt: RuntimeHandle, settings: Settings, reads: ReadModel, base_url: str
) -> None:
    """GET /v1/workflows/{id} and /result: from the read model, or accepted here; each
    caller sees only the workflows it may (may_read), and every read is logged."""

    async def readable(workflow_id: str, who: ApiKey, what: str) -> tuple[dict[str, Any] | None, Any]:
        """The workflow's view (None while only accepted here) and its submission row,
        if ``who`` may read it; otherwise the same 404 as for an unknown workflow."""
        # The reads are HTTP calls: made without holding one of the pool's connections.
        view = await reads.workflow(workflow_id, for_whom=who.principal)
        async with rt.pool.acquire() as conn:
            accepted = await repository.find_by_workflow(conn, workflow_id)
            decided = who.role == "reviewer" and await repository.decided_on(conn, workflow_id, who.principal)
        waits_on = ((view or {}).get("pending_approval") or {}).get("tier")
        submitter = accepted.submitter if accepted is not None else None
        allowed = (view is not None or accepted is not None) and may_read(
            who.role, who.principal, who.tier, submitter=submitter, waits_on=waits_on, decided=decided
        )
        # The access log: who read which workflow's data, when, and whether it was let in.
        log.info(
            "workflow read",
            extra=fields(
                principal=who.principal, role=who.role, workflow_id=workflow_id, read=what, allowed=allowed
            ),
        )
        if not allowed:
            raise Problem(404, "Unknown workflow", f"no workflow {workflow_id!r}")
        return view, accepted

    @app.get("/v1/workflows", responses=problems(403, 503))
    async def workflows(
        request: Request,
        who: Anyone,
        status: Annotated[
            list[WorkflowStatus] | None,
            Query(
                max_length=10,
                description="any of these (repeat the parameter); attention: parked "
                "behind a dead letter, with why and since when",
            ),
        ] = None,
        workflow_type: Annotated[str | None, Query(max_length=200)] = None,
        stage: Annotated[str | None, Query(max_length=200, description="the latest event type")] = None,
        submitted_by: Annotated[str | None, Query(max_length=200, description="a principal")] = None,
        started_after: Annotated[QueryDateTime | None, Query(description="inclusive")] = None,
        started_before: Annotated[QueryDateTime | None, Query(description="exclusive")] = None,
        q: Annotated[str | None, Query(max_length=255, description="a workflow id or business key")] = None,
        order: Annotated[
            Literal["newest", "quietest"],
            Query(description="newest started first, or longest quiet first (a cursor keeps its own)"),
        ] = "newest",
        cursor: Annotated[
            str | None,
            Query(pattern=CURSOR_PATTERN, description="next_cursor of a page (it keeps its order)"),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    ) -> WorkflowPage:
        """Workflows matching every filter, a page at a time (follow ``next_cursor``).
        Operators and auditors list every workflow; a submitter its own."""
        if who.role == "submitter":
            if submitted_by not in (None, who.principal):
                raise Problem(403, "Forbidden", "submitters list their own workflows only")
            submitted_by = who.principal
        elif who.role not in ("operator", "auditor"):
            raise Problem(
                403,
                "Forbidden",
                f"a {who.role} does not list workflows: operators and auditors list every one, "
                "submitters their own (a reviewer's work is in /v1/approvals)",
            )
        params: dict[str, Any] = {
            "status": status,
            "workflow_type": workflow_type,
            "stage": stage,
            "submitted_by": keyed_ref(settings.subject_key, submitted_by) if submitted_by else None,
            "started_after": started_after.isoformat() if started_after else None,
            "started_before": started_before.isoformat() if started_before else None,
            "q": q,
            "order": order,
            "cursor": cursor,
            "limit": str(limit),
        }
        page = await reads.workflows(
            {k: v for k, v in params.items() if v is not None}, for_whom=who.principal
        )
        next_url = None
        if page.get("next_cursor"):
            next_url = str(request.url.include_query_params(cursor=page["next_cursor"]))
        return WorkflowPage(workflows=page["workflows"], next_cursor=page.get("next_cursor"), next=next_url)

    @app.get("/v1/workflows/{workflow_id}", responses=problems(404))
    async def status(workflow_id: WorkflowId, who: Anyone) -> dict[str, Any]:
        """Status, current stage, what it waits for and until when, and its timeline."""
        view, accepted = await readable(workflow_id, who, "status")
        if view is None:
            return {
                "workflow_id": workflow_id,
                "workflow_type": accepted.workflow_type,
                "status": "accepted",
                "accepted_at": accepted.accepted_at.isoformat(),
                "timeline": [],
            }
        view["timeline"] = await reads.timeline(workflow_id, for_whom=who.principal)
        return view

    @app.post(
        "/v1/workflows/{workflow_id}/cancel",
        status_code=202,
        responses={
            200: {"description": "cancelled already (by this request, earlier)"},
            **problems(403, 404, 409),
        },
    )
    async def cancel(workflow_id: WorkflowId, body: CancelBody, who: SubmitterOrOperator) -> JSONResponse:
        """Stop a running workflow: it ends as ``cancelled`` and what the saga says is undone
        (a reserved budget is released). The submitter or an operator; asking again answers
        with the first request (``Idempotent-Replayed``); 409 once it ended otherwise."""
        view, accepted = await readable(workflow_id, who, "cancel")
        if who.role != "operator" and not same_person(
            accepted.submitter if accepted else None, who.principal
        ):
            raise Problem(
                403, "Forbidden", f"only the submitter of {workflow_id} or an operator may cancel it"
            )
        outcome = (view or {}).get("outcome")
        async with rt.pool.acquire() as conn:
            request = await repository.find_cancellation(conn, workflow_id)
            if outcome is not None and (request is None or outcome != "cancelled"):
                ended_at = (view or {}).get("ended_at")
                raise Problem(409, "Already ended", f"workflow {workflow_id} ended ({outcome}) at {ended_at}")
            replayed = request is not None
            if request is None:
                now = rt.clock.now()
                asked = WorkflowCancelRequested(requested_by=who.principal, reason=body.reason)
                workflow_type = (view or {}).get("workflow_type") or (
                    accepted.workflow_type if accepted else "unknown"
                )
                envelope = _in_workflow(
                    rt, asked, workflow_id, workflow_type, accepted, f"cancel:{workflow_id}", now
                )
                async with rt.outbox.transaction(conn) as tx:
                    request = await repository.insert_cancellation(
                        conn, workflow_id=workflow_id, requested_by=who.principal, reason=body.reason, now=now
                    )
                    if request is not None:
                        await tx.publish(envelope)
                replayed = request is None
                request = request or await repository.find_cancellation(conn, workflow_id)
        assert request is not None  # inserted now, or by the request that won the race
        status_url = f"{base_url}/v1/workflows/{workflow_id}"
        return JSONResponse(
            {
                "workflow_id": workflow_id,
                "status": "cancelled" if outcome == "cancelled" else "cancelling",
                "requested_by": request.requested_by,
                "reason": request.reason,
                "requested_at": request.requested_at.isoformat(),
                "status_url": status_url,
            },
            status_code=200 if outcome == "cancelled" else 202,
            headers={"Location": status_url, **({"Idempotent-Replayed": "true"} if replayed else {})},
        )

    @app.get("/v1/workflows/{workflow_id}/result", responses=problems(404, 409))
    async def result(workflow_id: WorkflowId, who: Anyone) -> dict[str, Any]:
        view, _ = await readable(workflow_id, who, "result")
        if view is None or not view.get("ended_at"):
            raise Problem(
                409,
                "Not finished",
                f"workflow {workflow_id} has not ended yet",
                status_url=f"{base_url}/v1/workflows/{workflow_id}",
            )
        return {
            "workflow_id": workflow_id,
            "outcome": view.get("outcome"),
            "result": view.get("result"),
            "ended_at": view.get("ended_at"),
        }


def _approval_routes(app: FastAPI, rt: RuntimeHandle, reads: ReadModel) -> None:
    """GET /v1/approvals and POST /v1/approvals/{id}: the reviewer's queue and decisions."""

    @app.get("/v1/me")
    async def me(who: Anyone) -> dict[str, Any]:
        """Who this key is: principal, role and (reviewers) tier. A client (the console)
        signs its user in with this."""
        return {"principal": who.principal, "role": who.role, "tier": who.tier}

    @app.get("/v1/approvals")
    async def approvals(
        who: ReviewerOrOperator,
        assignee: Annotated[str, Query(max_length=200, description="me, all, or a tier (operators)")] = "me",
    ) -> dict[str, Any]:
        """Pending approvals for the caller's tier (``assignee=me``); operators see every tier."""
        if assignee != "me" and who.role != "operator":
            raise Problem(403, "Forbidden", "reviewers list their own approvals only (assignee=me)")
        tier = who.tier if who.role == "reviewer" else (None if assignee in ("me", "all") else assignee)
        items = await reads.pending_approvals(tier, for_whom=who.principal)
        return {"assignee": who.principal, "tier": tier, "approvals": items}

    @app.get("/v1/approvals/{approval_id}", responses=problems(404))
    async def approval(approval_id: ApprovalId, who: Anyone) -> dict[str, Any]:
        """One approval: its status (pending, decided, closed), the tier it waits on, its
        window, review context and decision. For a reviewer of the tier it waits on (or who
        decided it), operators and auditors; anyone else gets the 404 of an unknown one."""
        found = await reads.approval(approval_id, for_whom=who.principal)
        if found is None:
            raise Problem(404, "Unknown approval", f"no approval {approval_id!r}")
        async with rt.pool.acquire() as conn:
            submitted = await repository.decisions_of(conn, approval_id)
        allowed = who.role in ("operator", "auditor") or (
            who.role == "reviewer"
            and (
                any(d.reviewer == who.principal for d in submitted)
                or (found["status"] == "pending" and found.get("tier") == who.tier)
            )
        )
        if not allowed:
            raise Problem(404, "Unknown approval", f"no approval {approval_id!r}")
        # Who decided: the reviewer whose submission the gate accepted (the last one with
        # the final decision), or the gate's fallback when nobody answered in time.
        final = [d for d in submitted if d.decision == found.get("decision")]
        decided_by = None
        if found["status"] == "decided":
            decided_by = final[-1].reviewer if final else "chorus:fallback"
        return {
            **found,
            "decided_by": decided_by,
            "submitted_decisions": [{**vars(d), "decided_at": d.decided_at.isoformat()} for d in submitted],
        }

    @app.post("/v1/approvals/{approval_id}", status_code=202, responses=problems(403, 404, 409))
    async def decide(approval_id: ApprovalId, body: DecisionBody, who: Reviewer) -> JSONResponse:
        """Approve, reject or ask for a revision. Only the tier the approval waits on may decide."""
        pending = await reads.approval(approval_id, for_whom=who.principal)
        if pending is None:
            raise Problem(404, "Unknown approval", f"no approval {approval_id!r}")
        if pending["status"] == "closed":
            why = pending.get("closed_reason") or "the workflow ended"
            raise Problem(409, "Approval withdrawn", f"approval {approval_id} is no longer open: {why}")
        if pending["status"] != "pending":
            raise Problem(409, "Already decided", f"approval {approval_id} is {pending['status']}")
        if pending["tier"] != who.tier:
            raise Problem(
                403,
                "Forbidden",
                f"approval {approval_id} waits on tier {pending['tier']!r}; you review for {who.tier!r}",
            )
        async with rt.pool.acquire() as conn:
            now = rt.clock.now()
            submission = await repository.find_by_workflow(conn, pending["workflow_id"])
            if same_person(submission.submitter if submission else None, who.principal):
                raise Problem(
                    403,
                    "Separation of duties",
                    f"{who.principal} submitted workflow {pending['workflow_id']}: another reviewer "
                    f"of tier {pending['tier']!r} decides approval {approval_id}",
                )
            submitted = _decision_envelope(rt, pending, submission, approval_id, body, who, now)
            async with rt.outbox.transaction(conn) as tx:
                first = await repository.insert_decision(
                    conn,
                    approval_id=approval_id,
                    level=int(pending.get("level") or 0),
                    workflow_id=pending["workflow_id"],
                    reviewer=who.principal,
                    decision=body.decision,
                    comment=body.comment,
                    now=now,
                )
                if not first:
                    raise Problem(409, "Already decided", f"approval {approval_id} already has a decision")
                await tx.publish(submitted)
        return JSONResponse(
            {
                "approval_id": approval_id,
                "decision": body.decision,
                "status": "submitted",
                "workflow_id": pending["workflow_id"],
            },
            status_code=202,
        )


def _policy_routes(app: FastAPI, policy: ApprovalPolicyApi) -> None:
    """The approval policy (owned by the approval gate): read it, change it, its history."""

    def forwarded(status: int, body: Any) -> JSONResponse:
        media = "application/problem+json" if status >= 400 else "application/json"
        return JSONResponse(body, status_code=status, media_type=media)

    @app.get("/v1/approval-policy", responses=problems(503))
    async def approval_policy(request: Request, who: OperatorOrAuditor) -> JSONResponse:
        """The policy in force: version, rules (first match routes an approval), who changed it, why."""
        return forwarded(*await policy.forward("GET", "/v1/approval-policy", _authorization(request)))

    @app.put("/v1/approval-policy", responses=problems(503))
    async def change_approval_policy(
        request: Request, body: ApprovalPolicyChange, who: Operator
    ) -> JSONResponse:
        """A new version of the rules; it applies to the next approval, without a restart."""
        answer = await policy.forward(
            "PUT", "/v1/approval-policy", _authorization(request), body.model_dump(mode="json")
        )
        return forwarded(*answer)

    @app.get("/v1/approval-policy/history", responses=problems(503))
    async def approval_policy_history(
        request: Request, who: OperatorOrAuditor, limit: Annotated[int, Query(ge=1, le=1000)] = 100
    ) -> JSONResponse:
        """Every version, newest first: the audit trail of the policy."""
        path = "/v1/approval-policy/history"
        return forwarded(
            *await policy.forward("GET", path, _authorization(request), params={"limit": str(limit)})
        )


def _authorization(request: Request) -> str:
    """The caller's key as the approval gate reads it (it records who changed the policy)."""
    key = request.headers.get("x-api-key")
    return f"Bearer {key}" if key else request.headers.get("authorization", "")


def _submit_route(app: FastAPI, name: str, kind: WorkflowKind, submit: Any) -> None:
    longest_s = kind.deadline_s

    async def submit_workflow(
        body: Any,
        who: SubmitterOrOperator,
        idempotency_key: IdempotencyKey = None,
        traceparent: Traceparent = None,
    ) -> JSONResponse:
        # Accepting is the workflow's first span: a child of the caller's trace, if any.
        with request_span("gateway", f"accept {name}", traceparent) as accepted:
            return cast(JSONResponse, await submit(name, kind, body, who, idempotency_key, accepted))

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
    app.post(
        f"/v1/workflows/{name}",
        status_code=202,
        responses=problems(409),
        name=f"submit_{name}",
        summary=f"Start a {name} workflow",
        description="Answers 202 with the workflow's id at once; the work runs in the agent services. "
        "An Idempotency-Key makes retries safe (409 when it was used for a different request).",
    )(submit_workflow)


def envelope_idempotency_key(principal: str, key: str) -> str:
    """The key on the workflow's events: per caller, within the envelope's 200 characters
    (a long key is replaced by its digest, the same on every retry)."""
    candidate = f"{principal}:{key}"
    if len(candidate) <= 200:
        return candidate
    return f"{principal[:100]}:sha256:{hashlib.sha256(candidate.encode()).hexdigest()}"


async def _messages(rt: RuntimeHandle, envelopes: list[tuple[Envelope, str]]) -> list[OutboxMessage]:
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


def _replayed(existing: repository.SubmissionRow, digest: str, base_url: str) -> JSONResponse:
    if existing.request_hash != digest:
        raise Problem(409, "Idempotency key reused", "this Idempotency-Key was used for a different request")
    status_url = f"{base_url}/v1/workflows/{existing.workflow_id}"
    return JSONResponse(
        {"workflow_id": existing.workflow_id, "status_url": status_url, "status": "accepted"},
        status_code=202,
        headers={"Location": status_url, "Idempotent-Replayed": "true"},
    )


def _deadline_timer(rt: RuntimeHandle, started: Envelope, deadline_at: Any, now: Any) -> Envelope:
    fired = child_envelope(
        started,
        WorkflowDeadlineReached(deadline_at=deadline_at),
        producer=rt.producer,
        now=now,
        position="deadline",
        traceparent=started.traceparent,  # made by the accepting request's span, as the rest
    )
    command = TimerSchedule(
        timer_id=f"gateway:{started.workflow_id}:deadline",
        due_at=deadline_at,
        fire=FireTarget(
            topic=rt.registry.physical_topic(fired.event_type, fired.priority),
            key=started.workflow_id,
            value=fired.model_dump(mode="json"),
        ),
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


def _decision_envelope(
    rt: RuntimeHandle,
    pending: dict[str, Any],
    submission: repository.SubmissionRow | None,
    approval_id: str,
    body: DecisionBody,
    who: ApiKey,
    now: Any,
) -> Envelope:
    """The reviewer's decision, in the workflow's own trace and priority lane."""
    decision = ApprovalDecisionSubmitted(
        approval_id=approval_id,
        decision=body.decision,
        comment=body.comment,
        reviewer=who.principal,
        reviewer_tier=who.tier or "",
    )
    return _in_workflow(
        rt,
        decision,
        pending["workflow_id"],
        pending.get("workflow_type") or "unknown",
        submission,
        f"decision:{approval_id}:{pending.get('level') or 0}",
        now,
    )


def _in_workflow(
    rt: RuntimeHandle,
    event: EventModel,
    workflow_id: str,
    workflow_type: str,
    submission: repository.SubmissionRow | None,
    idempotency_key: str,
    now: Any,
) -> Envelope:
    """An event a person's request adds to a running workflow: in its trace (a span of the
    gateway's, the request's) and its priority lane."""
    priority: Priority = "normal"
    if submission is not None and submission.priority in ("high", "normal", "low"):
        priority = submission.priority  # type: ignore[assignment]
    with request_span("gateway", event.event_type, submission.traceparent if submission else None) as current:
        return start_envelope(
            event,
            workflow_id=workflow_id,
            workflow_type=workflow_type,
            producer=rt.producer,
            now=now,
            idempotency_key=idempotency_key,
            correlation_id=workflow_id,
            pins=json.loads(submission.pins) if submission is not None and submission.pins else None,
            traceparent=current,
            priority=priority,
        )
