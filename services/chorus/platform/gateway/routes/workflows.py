"""GET /v1/workflows, GET /v1/workflows/{id} (and /result), POST /v1/workflows/{id}/cancel:
from the read model, or accepted here; each caller sees only the workflows it may
(may_read), and every read is logged."""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import Query, Request
from fastapi.responses import JSONResponse

from chorus.base.logs import fields
from chorus.contracts.api.audit_projector import CURSOR_PATTERN, WorkflowStatusView
from chorus.contracts.api.gateway import (
    AcceptedWorkflow,
    CancelAccepted,
    CancelBody,
    SearchAttributes,
    WorkflowDetail,
    WorkflowPage,
    WorkflowResult,
)
from chorus.contracts.lifecycle import WorkflowStatus
from chorus.contracts.search import BUILTIN, MAX_QUERY, SearchQueryError, attribute_types, parse
from chorus.platform.gateway.adapters import repository
from chorus.platform.gateway.domain import may_read, same_person
from chorus.platform.gateway.routes.deps import Anyone, Api, GatewayApi, SubmitterOrOperator, WorkflowId
from chorus.platform.gateway.routes.events import ask_to_cancel
from chorus.privacy.crypto import keyed_ref
from chorus.web.apikeys import ApiKey
from chorus.web.webapi import Problem, QueryDateTime, api_router, problems

log = logging.getLogger("chorus.platform.gateway.api")

router = api_router()


async def readable(
    api: GatewayApi, workflow_id: str, who: ApiKey, what: str
) -> tuple[WorkflowStatusView | None, repository.SubmissionRow | None]:
    """The workflow's view (None while only accepted here) and its submission row, if
    ``who`` may read it; otherwise the same 404 as for an unknown workflow."""
    # The reads are HTTP calls: made without holding one of the pool's connections.
    view = await api.reads.workflow(workflow_id, for_whom=who.principal)
    async with api.rt.pool.acquire() as conn:
        accepted = await repository.find_by_workflow(conn, workflow_id)
        decided = who.role == "reviewer" and await repository.decided_on(conn, workflow_id, who.principal)
    waits_on = view.pending_approval.tier if view is not None and view.pending_approval else None
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


@router.get("/v1/search-attributes")
async def search_attributes(who: Anyone, api: Api) -> SearchAttributes:
    """What ``GET /v1/workflows?query=`` searches by: each workflow type's attributes
    (workflows.yaml), and the columns every workflow has."""
    registry = api.rt.registry
    return SearchAttributes(
        builtin={name: "keyword" for name in BUILTIN},
        workflow_types={
            name: {attr: declared.type for attr, declared in registry.search_attributes(name).items()}
            for name in sorted(registry.workflows)
        },
    )


@router.get("/v1/workflows", responses=problems(400, 403, 503))
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
    query: Annotated[
        str | None,
        Query(
            max_length=MAX_QUERY,
            description="a search over the workflow types' search attributes (GET "
            "/v1/search-attributes) and status, workflow_type, stage: vendor = 'vendor-acme' AND "
            "amount > 10000 AND status = 'waiting'; =, !=, <, <=, >, >=, IN (...), AND, OR, NOT, "
            "parentheses, 'text' and numbers",
        ),
    ] = None,
    order: Annotated[
        Literal["newest", "quietest"],
        Query(description="newest started first, or longest quiet first (a cursor keeps its own)"),
    ] = "newest",
    cursor: Annotated[
        str | None,
        Query(pattern=CURSOR_PATTERN, description="next_cursor of a page (it keeps its order)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    *,
    api: Api,
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
    if query is not None:
        try:  # refused here, with the words the projector would use, before any read
            parse(query, attribute_types(api.rt.registry))
        except SearchQueryError as exc:
            raise Problem(400, "Invalid query", str(exc)) from None
    params: dict[str, Any] = {
        "query": query,
        "status": status,
        "workflow_type": workflow_type,
        "stage": stage,
        "submitted_by": keyed_ref(api.settings.subject_key, submitted_by) if submitted_by else None,
        "started_after": started_after.isoformat() if started_after else None,
        "started_before": started_before.isoformat() if started_before else None,
        "q": q,
        "order": order,
        "cursor": cursor,
        "limit": str(limit),
    }
    page = await api.reads.workflows(
        {k: v for k, v in params.items() if v is not None}, for_whom=who.principal
    )
    next_url = None
    if page.next_cursor:
        next_url = str(request.url.include_query_params(cursor=page.next_cursor))
    return WorkflowPage(workflows=page.workflows, next_cursor=page.next_cursor, next=next_url)


@router.get("/v1/workflows/{workflow_id}", responses=problems(404))
async def status(workflow_id: WorkflowId, who: Anyone, api: Api) -> dict[str, Any]:
    """Status, current stage, what it waits for and until when, and its timeline."""
    view, accepted = await readable(api, workflow_id, who, "status")
    if view is None:
        assert accepted is not None  # readable: one of the two
        return AcceptedWorkflow(
            workflow_id=workflow_id, workflow_type=accepted.workflow_type, accepted_at=accepted.accepted_at
        ).model_dump(mode="json")
    timeline = await api.reads.timeline(workflow_id, for_whom=who.principal)
    return WorkflowDetail(**dict(view), timeline=timeline).model_dump(mode="json")


@router.post(
    "/v1/workflows/{workflow_id}/cancel",
    status_code=202,
    responses={
        200: {"description": "cancelled already (by this request, earlier)"},
        **problems(403, 404, 409),
    },
)
async def cancel(
    workflow_id: WorkflowId, body: CancelBody, who: SubmitterOrOperator, api: Api
) -> JSONResponse:
    """Stop a running workflow: it ends as ``cancelled`` and what the saga says is undone
    (a reserved budget is released). The submitter or an operator; asking again answers
    with the first request (``Idempotent-Replayed``); 409 once it ended otherwise."""
    view, accepted = await readable(api, workflow_id, who, "cancel")
    if who.role != "operator" and not same_person(accepted.submitter if accepted else None, who.principal):
        raise Problem(403, "Forbidden", f"only the submitter of {workflow_id} or an operator may cancel it")
    outcome = view.outcome if view is not None else None
    async with api.rt.pool.acquire() as conn:
        request = await repository.find_cancellation(conn, workflow_id)
        if outcome is not None and (request is None or outcome != "cancelled"):
            ended_at = view.model_dump(mode="json")["ended_at"] if view is not None else None
            raise Problem(409, "Already ended", f"workflow {workflow_id} ended ({outcome}) at {ended_at}")
        replayed = request is not None
        if request is None:
            request = await _ask_to_cancel(api, conn, workflow_id, view, accepted, who, body)
            replayed = request is None
            request = request or await repository.find_cancellation(conn, workflow_id)
    assert request is not None  # inserted now, or by the request that won the race
    status_url = api.status_url(workflow_id)
    answer = CancelAccepted(
        workflow_id=workflow_id,
        status="cancelled" if outcome == "cancelled" else "cancelling",
        requested_by=request.requested_by,
        reason=request.reason,
        requested_at=request.requested_at,
        status_url=status_url,
    )
    return JSONResponse(
        answer.model_dump(mode="json"),
        status_code=200 if outcome == "cancelled" else 202,
        headers={"Location": status_url, **({"Idempotent-Replayed": "true"} if replayed else {})},
    )


async def _ask_to_cancel(
    api: GatewayApi,
    conn: asyncpg.Connection,
    workflow_id: str,
    view: WorkflowStatusView | None,
    accepted: repository.SubmissionRow | None,
    who: ApiKey,
    body: CancelBody,
) -> repository.CancellationRow | None:
    workflow_type = (view.workflow_type if view is not None else None) or (
        accepted.workflow_type if accepted else "unknown"
    )
    return await ask_to_cancel(api.rt, conn, workflow_id, workflow_type, accepted, who.principal, body.reason)


@router.get("/v1/workflows/{workflow_id}/result", responses=problems(404, 409))
async def result(workflow_id: WorkflowId, who: Anyone, api: Api) -> dict[str, Any]:
    view, _ = await readable(api, workflow_id, who, "result")
    if view is None or not view.ended_at:
        raise Problem(
            409,
            "Not finished",
            f"workflow {workflow_id} has not ended yet",
            status_url=api.status_url(workflow_id),
        )
    return WorkflowResult(
        workflow_id=workflow_id, outcome=view.outcome, result=view.result, ended_at=view.ended_at
    ).model_dump(mode="json")
