"""POST /v1/workflows/{id}/reset: an operator takes a waiting workflow back to one of its
events (chorus.resets). The gateway checks it may (gateway.domain.plan_reset), records it
and states workflow.reset_requested in one transaction; every service rolls back and says
what it did (workflow.reset_applied, in the timeline)."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import uuid
from datetime import datetime
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import ValidationError

from chorus.base.logs import fields
from chorus.contracts.api.audit_projector import WorkflowStatusView
from chorus.contracts.api.gateway import ResetAccepted, ResetBody
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import ResetRequested
from chorus.contracts.platform import OriginalRecord
from chorus.kernel.envelopes import derived_event_id
from chorus.kernel.records import Record, to_original
from chorus.kernel.service import RuntimeHandle
from chorus.platform.gateway.adapters import repository
from chorus.platform.gateway.adapters.readmodel import ReadModel
from chorus.platform.gateway.domain import ResetPlan, TimelineEvent, plan_reset
from chorus.platform.gateway.routes.deps import (
    Api,
    GatewayApi,
    IdempotencyKey,
    Operator,
    WorkflowId,
    invalid_input,
)
from chorus.platform.gateway.routes.events import in_workflow
from chorus.platform.gateway.routes.submit import outbox_messages, refuse_inner_urls
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
    workflow declares how (workflows.yaml: reset.compensated), and each service whose step
    kept a checkpoint handles the event again (with ``input``: the corrected event instead).
    Refused (409) while the workflow runs, once it ended, or past an event nothing gives back
    (reset.irreversible: a payment issued). Operators only; asked again with its
    Idempotency-Key, it answers with the first (200)."""
    view, accepted = await readable(api, workflow_id, who, "reset")
    reset_id = "rst-" + (
        uuid.uuid5(uuid.NAMESPACE_URL, f"{who.principal}/{workflow_id}/{idempotency_key}").hex
        if idempotency_key
        else secrets.token_hex(16)
    )
    async with api.rt.pool.acquire() as conn:
        earlier = await repository.find_reset(conn, reset_id)
    if earlier is not None:
        if earlier.request_hash != _request_hash(body):
            raise Problem(409, "Idempotency key reused", "this Idempotency-Key was used for another reset")
        return _accepted(api, earlier, replayed=True)
    if view is None:
        raise Problem(409, "Not started yet", f"workflow {workflow_id} has no step to go back to yet")
    timeline = await timeline_of(api.reads, workflow_id, who.principal)
    plan = planned(api.rt, view, timeline, body.event_id, edit=body.input is not None)
    if not isinstance(plan, ResetPlan):
        status, detail = plan
        raise Problem(status, "Cannot reset", detail)
    if body.input is not None:  # the point itself is replaced: undone with the rest
        plan = ResetPlan(plan.point, [plan.point, *plan.undone], plan.compensated)
    now = api.rt.clock.now()
    replacement = (
        await _corrected(api, view, accepted, plan.point, body.input, reset_id, now)
        if body.input is not None
        else None
    )
    row, envelope = reset_request(
        api.rt,
        view,
        accepted,
        plan,
        reset_id=reset_id,
        requested_by=who.principal,
        reason=body.reason,
        replacement=replacement,
        request_hash=_request_hash(body),
        now=now,
    )
    async with api.rt.pool.acquire() as conn, api.rt.outbox.transaction(conn) as tx:
        recorded = await repository.insert_reset(conn, row)
        if recorded:
            await tx.publish(envelope)
        else:  # the same request, at the same moment: the one recorded stands
            row = await repository.find_reset(conn, reset_id) or row
    log.warning(
        "reset requested",
        extra=fields(workflow_id=workflow_id, reset_id=reset_id, by=who.principal, to=plan.point.event_type),
    )
    return _accepted(api, row, replayed=not recorded)


async def timeline_of(reads: ReadModel, workflow_id: str, for_whom: str) -> list[TimelineEvent]:
    """The workflow's timeline as a reset sees it (what was undone, where each came from)."""
    return [
        TimelineEvent(e.event_id, e.event_type, e.occurred_at, e.undone_by, e.origin)
        for e in await reads.timeline(workflow_id, for_whom=for_whom)
    ]


def planned(
    rt: RuntimeHandle, view: WorkflowStatusView, timeline: list[TimelineEvent], event_id: str, *, edit: bool
) -> ResetPlan | tuple[int, str]:
    """What a reset of the workflow to ``event_id`` undoes, as its type declares (or why not)."""
    declared = rt.registry.reset_of(view.workflow_type)
    return plan_reset(timeline, event_id, view.status, declared.compensated, declared.irreversible, edit=edit)


def reset_request(
    rt: RuntimeHandle,
    view: WorkflowStatusView,
    accepted: repository.SubmissionRow | None,
    plan: ResetPlan,
    *,
    reset_id: str,
    requested_by: str,
    reason: str,
    replacement: tuple[uuid.UUID, OriginalRecord] | None,
    request_hash: str,
    now: datetime,
) -> tuple[repository.ResetRow, Envelope]:
    """The reset's row here and its ``workflow.reset_requested``, to commit together."""
    row = repository.ResetRow(
        reset_id=reset_id,
        workflow_id=view.workflow_id,
        point_event_id=uuid.UUID(plan.point.event_id),
        point_event_type=plan.point.event_type,
        undone=[e.event_type for e in plan.undone],
        compensated=plan.compensated,
        replacement_event_id=replacement[0] if replacement else None,
        requested_by=requested_by,
        reason=reason,
        requested_at=now,
        request_hash=request_hash,
    )
    request = ResetRequested(
        reset_id=reset_id,
        point_event_id=row.point_event_id,
        point_event_type=row.point_event_type,
        undone=[uuid.UUID(e.event_id) for e in plan.undone],
        requested_by=requested_by,
        reason=reason,
        replacement_event_id=row.replacement_event_id,
        replacement=replacement[1] if replacement else None,
    )
    envelope = in_workflow(
        rt, request, view.workflow_id, view.workflow_type, accepted, f"reset:{reset_id}", now
    ).model_copy(update={"subject_ref": view.subject_ref})  # its row goes with the subject's
    return row, envelope


def _request_hash(body: ResetBody) -> str:
    """What makes two requests the same reset (an Idempotency-Key's retry)."""
    canonical = {"event_id": str(uuid.UUID(body.event_id)), "reason": body.reason, "input": body.input}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


def _accepted(api: GatewayApi, row: repository.ResetRow, *, replayed: bool) -> JSONResponse:
    status_url = api.status_url(row.workflow_id)
    answer = ResetAccepted(
        reset_id=row.reset_id,
        workflow_id=row.workflow_id,
        point_event_id=str(row.point_event_id),
        point_event_type=row.point_event_type,
        replacement_event_id=str(row.replacement_event_id) if row.replacement_event_id else None,
        undone=row.undone,
        compensated=row.compensated,
        requested_by=row.requested_by,
        reason=row.reason,
        requested_at=row.requested_at,
        status_url=status_url,
    )
    return JSONResponse(
        answer.model_dump(mode="json"),
        status_code=200 if replayed else 202,
        headers={"Location": status_url, **({"Idempotent-Replayed": "true"} if replayed else {})},
    )


async def _corrected(
    api: GatewayApi,
    view: WorkflowStatusView,
    accepted: repository.SubmissionRow | None,
    point: TimelineEvent,
    data: dict[str, Any],
    reset_id: str,
    now: datetime,
) -> tuple[uuid.UUID, OriginalRecord]:
    """Edit-and-reset: the point's event as the operator corrected it, stated by the gateway
    (the only service that may: its signers are the gateway alone) under a new id, sealed and
    signed as it would publish it: (its id, the record the reset carries). 422 naming the
    field the event's schema refuses."""
    registry = api.rt.registry
    start = api.kinds[view.workflow_type].start.event_type if view.workflow_type in api.kinds else None
    if point.event_type != start:
        stated = ", ".join(sorted(registry.signers_of(point.event_type))) or "no one in particular"
        raise Problem(
            422,
            "Cannot edit",
            f"{point.event_type} is stated by {stated}: only the workflow's start event ({start}), the "
            "submission's input, can be corrected; reset to it without input",
        )
    try:
        event = registry.latest_model(point.event_type).model_validate(data)
    except ValidationError as exc:
        raise invalid_input(exc) from None
    await refuse_inner_urls(event.model_dump(mode="json"))
    event_id = derived_event_id(uuid.UUID(point.event_id), "gateway", f"reset/{reset_id}")
    envelope = in_workflow(
        api.rt, event, view.workflow_id, view.workflow_type, accepted, f"reset:{reset_id}:input", now
    ).model_copy(
        update={
            "event_id": event_id,
            "idempotency_key": str(event_id),
            "correlation_id": view.workflow_id,
            "subject_ref": view.subject_ref,
        }
    )
    (message,) = await outbox_messages(api.rt, [(envelope, "/input")])
    record = Record(message.topic, 0, 0, message.key, message.value, tuple(message.headers))
    return event_id, to_original(record)
