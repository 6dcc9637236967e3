"""POST /v1/workflows/{id}/reset: an operator takes a waiting workflow back to one of its
events (chorus.resets). The gateway checks it may (gateway.domain.plan_reset), records it
and states workflow.reset_requested in one transaction; every service rolls back and says
what it did (workflow.reset_applied, in the timeline)."""

from __future__ import annotations

import logging
import secrets
import uuid

from fastapi.responses import JSONResponse

from chorus.base.logs import fields
from chorus.contracts.api.gateway import ResetAccepted, ResetBody
from chorus.contracts.lifecycle import ResetRequested
from chorus.platform.gateway.adapters import repository
from chorus.platform.gateway.domain import ResetPlan, TimelineEvent, plan_reset
from chorus.platform.gateway.routes.deps import Api, IdempotencyKey, Operator, WorkflowId
from chorus.platform.gateway.routes.events import in_workflow
from chorus.platform.gateway.routes.workflows import readable
from chorus.web.webapi import Problem, api_router, problems

log = logging.getLogger("chorus.platform.gateway.api")

router = api_router()


@router.post(
    "/v1/workflows/{workflow_id}/reset",
    status_code=202,
    responses={
        200: {"description": "the same reset, asked again (Idempotency-Key)"},
        **problems(404, 409, 422),
    },
)
async def reset(
    workflow_id: WorkflowId, body: ResetBody, who: Operator, api: Api, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Take a waiting workflow back to one of its events: every service rolls its state back
    to what it was before handling it, what the steps after it took is given back where the
    workflow declares how (workflows.yaml: reset.compensated), and the event is handled
    again. Refused (409) while the workflow runs, once it ended, or past an event nothing
    gives back (reset.irreversible: a payment issued). Operators only."""
    view, accepted = await readable(api, workflow_id, who, "reset")
    if view is None:
        raise Problem(409, "Not started yet", f"workflow {workflow_id} has no step to go back to yet")
    timeline = [
        TimelineEvent(e.event_id, e.event_type, e.occurred_at, e.undone_by)
        for e in await api.reads.timeline(workflow_id, for_whom=who.principal)
    ]
    declared = api.rt.registry.reset_of(view.workflow_type)
    plan = plan_reset(timeline, body.event_id, view.status, declared.compensated, declared.irreversible)
    if not isinstance(plan, ResetPlan):
        status, detail = plan
        raise Problem(status, "Cannot reset", detail)
    reset_id = "rst-" + (
        uuid.uuid5(uuid.NAMESPACE_URL, f"{who.principal}/{workflow_id}/{idempotency_key}").hex
        if idempotency_key
        else secrets.token_hex(16)
    )
    now = api.rt.clock.now()
    row = repository.ResetRow(
        reset_id, workflow_id, uuid.UUID(plan.point.event_id), plan.point.event_type, len(plan.undone),
        who.principal, body.reason, now,
    )  # fmt: skip
    request = ResetRequested(
        reset_id=reset_id,
        point_event_id=uuid.UUID(plan.point.event_id),
        point_event_type=plan.point.event_type,
        undone=[uuid.UUID(e.event_id) for e in plan.undone],
        requested_by=who.principal,
        reason=body.reason,
    )
    envelope = in_workflow(
        api.rt, request, workflow_id, view.workflow_type, accepted, f"reset:{reset_id}", now
    )
    async with api.rt.pool.acquire() as conn, api.rt.outbox.transaction(conn) as tx:
        recorded = await repository.insert_reset(conn, row)
        if recorded:
            await tx.publish(envelope)
        else:
            row = await repository.find_reset(conn, reset_id) or row
    log.warning(
        "reset requested",
        extra=fields(workflow_id=workflow_id, reset_id=reset_id, by=who.principal, to=plan.point.event_type),
    )
    answer = ResetAccepted(
        reset_id=reset_id,
        workflow_id=workflow_id,
        point_event_id=str(row.point_event_id),
        point_event_type=row.point_event_type,
        undone=[e.event_type for e in plan.undone],
        compensated=plan.compensated,
        requested_by=row.requested_by,
        reason=row.reason,
        requested_at=row.requested_at,
        status_url=api.status_url(workflow_id),
    )
    return JSONResponse(
        answer.model_dump(mode="json"),
        status_code=202 if recorded else 200,
        headers={
            "Location": api.status_url(workflow_id),
            **({} if recorded else {"Idempotent-Replayed": "true"}),
        },
    )
