"""The HTTP API (FastAPI; its OpenAPI document is served at /openapi.json).

Accept-and-resume: POST answers 202 with a workflow id at once; the work runs in
the agent services. Reads come from the audit projection. Every error is
``application/problem+json`` naming what is wrong.
"""

from __future__ import annotations

import hmac
import uuid
from datetime import timedelta
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from chorus.envelopes import child_envelope, start_envelope
from chorus.outbox import outbox_message
from chorus.service import RuntimeHandle
from chorus.tracing import TraceContext
from chorus_contracts.approvals import ApprovalDecisionSubmitted
from chorus_contracts.envelope import Envelope, Priority
from chorus_contracts.lifecycle import WorkflowDeadlineReached, WorkflowStarted
from chorus_contracts.platform import FireTarget, TimerSchedule
from gateway.adapters import readmodel, repository
from gateway.config import ApiKey, Settings
from gateway.domain import WORKFLOW_TYPES, DecisionBody, Submission, request_hash

PROBLEM = "application/problem+json"


class Problem(Exception):
    def __init__(self, status: int, title: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.extra = status, title, detail, extra


def problem_response(status: int, title: str, detail: str, instance: str, **extra: Any) -> JSONResponse:
    body = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
    }
    return JSONResponse({**body, **extra}, status_code=status, media_type=PROBLEM)


def pointer(loc: tuple[Any, ...]) -> str:
    return "/" + "/".join(str(p) for p in loc)


# -- authentication (module level: FastAPI resolves these annotations from module globals) --


def principal(
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> ApiKey:
    """The caller, from ``Authorization: Bearer <key>`` (or ``X-API-Key``); 401 otherwise."""
    settings: Settings = request.app.state.settings
    presented = x_api_key or (authorization or "").removeprefix("Bearer ").strip()
    if not presented:
        raise Problem(401, "Unauthorized", "missing API key: send Authorization: Bearer <key>")
    for key, who in settings.api_keys.items():
        if hmac.compare_digest(key.encode(), presented.encode()):
            return who
    raise Problem(401, "Unauthorized", "unknown API key")


def role(*allowed: str) -> Any:
    """A dependency admitting only callers with one of ``allowed`` roles (403 otherwise)."""

    def check(who: Anyone) -> ApiKey:
        if who.role not in allowed:
            raise Problem(403, "Forbidden", f"{who.role} may not do this (needs {' or '.join(allowed)})")
        return who

    return check


SubmitterOrOperator = Annotated[ApiKey, Depends(role("submitter", "operator"))]
Reviewer = Annotated[ApiKey, Depends(role("reviewer"))]
ReviewerOrOperator = Annotated[ApiKey, Depends(role("reviewer", "operator"))]
Anyone = Annotated[ApiKey, Depends(principal)]


def create_app(rt: RuntimeHandle, settings: Settings) -> FastAPI:
    app = FastAPI(
        title="Chorus gateway",
        version="1.0.0",
        description="Submit long-running agent workflows, watch them, approve them.",
    )
    app.state.settings = settings
    base_url = settings.public_url or f"http://{settings.api_host}:{settings.api_port}"

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(exc.status, exc.title, exc.detail, request.url.path, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"pointer": pointer(tuple(e["loc"][1:])), "message": e["msg"]} for e in exc.errors()]
        first = errors[0] if errors else {"pointer": "/", "message": "invalid request"}
        return problem_response(
            422,
            "Invalid request",
            f"{first['pointer']}: {first['message']}",
            request.url.path,
            errors=errors,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem_response(exc.status_code, str(exc.detail), str(exc.detail), request.url.path)

    # -- submit ------------------------------------------------------------------------------

    @app.post("/v1/workflows/{workflow_type}", status_code=202)
    async def submit(
        workflow_type: str,
        body: Submission,
        request: Request,
        who: SubmitterOrOperator,
        idempotency_key: Annotated[str | None, Header()] = None,
        traceparent: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        """Start a workflow. Answers 202 with its id at once; an Idempotency-Key makes retries safe."""
        kind = WORKFLOW_TYPES.get(workflow_type)
        if kind is None:
            raise Problem(
                404,
                "Unknown workflow type",
                f"no workflow type {workflow_type!r}; known: {sorted(WORKFLOW_TYPES)}",
            )
        try:
            start_payload = kind.start.model_validate(body.input)
        except ValidationError as exc:
            errors = [
                {"pointer": pointer(("input", *e["loc"])), "message": e["msg"]}
                for e in exc.errors(include_url=False)
            ]
            raise Problem(
                422,
                "Invalid input",
                f"{errors[0]['pointer']}: {errors[0]['message']}",
                errors=errors,
            ) from None
        digest = request_hash(workflow_type, body)
        async with rt.pool.acquire() as conn:
            if idempotency_key:
                existing = await repository.find_by_key(conn, who.principal, idempotency_key)
                if existing is not None:
                    return _replayed(existing, digest, base_url)
            workflow_id = f"wf-{uuid.uuid4().hex[:20]}"
            now = rt.clock.now()
            deadline_at = now + timedelta(seconds=settings.deadlines_s.get(workflow_type, 86400))
            trace = TraceContext.parse(traceparent)
            started = start_envelope(
                WorkflowStarted(
                    submitted_by=who.principal,
                    start_event_type=kind.start.event_type,
                    callback_url=body.callback_url,
                    deadline_at=deadline_at,
                ),
                workflow_id=workflow_id,
                workflow_type=workflow_type,
                producer=rt.producer,
                now=now,
                idempotency_key=f"{who.principal}:{idempotency_key or workflow_id}",
                priority=body.priority,
                traceparent=trace.child().traceparent if trace else None,
                deadline=deadline_at,
                subject_ref=body.subject_ref,
            )
            # A microsecond after workflow.started, so timelines show the start first.
            first = child_envelope(
                started,
                start_payload,
                producer=rt.producer,
                now=now + timedelta(microseconds=1),
                position="start",
            )
            deadline_timer = _deadline_timer(rt, started, deadline_at, now)
            async with conn.transaction():
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
                )
                if inserted:
                    await rt.store.add_outbox(
                        conn,
                        [outbox_message(rt.registry, e) for e in (started, first, deadline_timer)],
                    )
            if not inserted:  # a concurrent retry with the same key won the race
                assert idempotency_key is not None
                winner = await repository.find_by_key(conn, who.principal, idempotency_key)
                assert winner is not None
                return _replayed(winner, digest, base_url)
        rt.wake_relay()
        status_url = f"{base_url}/v1/workflows/{workflow_id}"
        return JSONResponse(
            {"workflow_id": workflow_id, "status_url": status_url, "status": "accepted"},
            status_code=202,
            headers={"Location": status_url},
        )

    # -- watch -------------------------------------------------------------------------------

    @app.get("/v1/workflows/{workflow_id}")
    async def status(workflow_id: str, who: Anyone) -> dict[str, Any]:
        """Status, current stage, what it waits for and until when, and its timeline."""
        async with rt.pool.acquire() as conn:
            view = await readmodel.workflow(conn, workflow_id)
            if view is None:
                accepted = await repository.find_by_workflow(conn, workflow_id)
                if accepted is None:
                    raise Problem(404, "Unknown workflow", f"no workflow {workflow_id!r}")
                return {
                    "workflow_id": workflow_id,
                    "workflow_type": accepted.workflow_type,
                    "status": "accepted",
                    "accepted_at": accepted.accepted_at.isoformat(),
                    "timeline": [],
                }
            view["timeline"] = await readmodel.timeline(conn, workflow_id)
        return view

    @app.get("/v1/workflows/{workflow_id}/result")
    async def result(workflow_id: str, who: Anyone) -> dict[str, Any]:
        async with rt.pool.acquire() as conn:
            view = await readmodel.workflow(conn, workflow_id)
            if view is None and await repository.find_by_workflow(conn, workflow_id) is None:
                raise Problem(404, "Unknown workflow", f"no workflow {workflow_id!r}")
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

    # -- approve -------------------------------------------------------------------------------

    @app.get("/v1/approvals")
    async def approvals(who: ReviewerOrOperator, assignee: str = "me") -> dict[str, Any]:
        """Pending approvals for the caller's tier (``assignee=me``); operators see every tier."""
        if assignee != "me" and who.role != "operator":
            raise Problem(403, "Forbidden", "reviewers list their own approvals only (assignee=me)")
        tier = who.tier if who.role == "reviewer" else (None if assignee in ("me", "all") else assignee)
        async with rt.pool.acquire() as conn:
            items = await readmodel.pending_approvals(conn, tier)
        return {"assignee": who.principal, "tier": tier, "approvals": items}

    @app.post("/v1/approvals/{approval_id}", status_code=202)
    async def decide(approval_id: str, body: DecisionBody, who: Reviewer) -> JSONResponse:
        """Approve, reject or ask for a revision. Only the tier the approval waits on may decide."""
        async with rt.pool.acquire() as conn:
            pending = await readmodel.approval(conn, approval_id)
            if pending is None:
                raise Problem(404, "Unknown approval", f"no approval {approval_id!r}")
            if pending["status"] != "pending":
                raise Problem(409, "Already decided", f"approval {approval_id} is {pending['status']}")
            if pending["tier"] != who.tier:
                raise Problem(
                    403,
                    "Forbidden",
                    f"approval {approval_id} waits on tier {pending['tier']!r}; you review for {who.tier!r}",
                )
            now = rt.clock.now()
            submission = await repository.find_by_workflow(conn, pending["workflow_id"])
            submitted = _decision_envelope(rt, pending, submission, approval_id, body, who, now)
            async with conn.transaction():
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
                await rt.store.add_outbox(conn, [outbox_message(rt.registry, submitted)])
        rt.wake_relay()
        return JSONResponse(
            {
                "approval_id": approval_id,
                "decision": body.decision,
                "status": "submitted",
                "workflow_id": pending["workflow_id"],
            },
            status_code=202,
        )

    return app


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
    return child_envelope(started, command, producer=rt.producer, now=now, position="deadline-timer")


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
    trace = TraceContext.parse(submission.traceparent if submission else None)
    priority: Priority = "normal"
    if submission is not None and submission.priority in ("high", "normal", "low"):
        priority = submission.priority  # type: ignore[assignment]
    return start_envelope(
        decision,
        workflow_id=pending["workflow_id"],
        workflow_type=pending.get("workflow_type") or "unknown",
        producer=rt.producer,
        now=now,
        idempotency_key=f"decision:{approval_id}:{pending.get('level') or 0}",
        correlation_id=pending["workflow_id"],
        traceparent=trace.child().traceparent if trace else None,
        priority=priority,
    )
