"""Events a person's request adds to a running workflow (a cancel, a decision): in its
trace and its priority lane; and the cancel request, whoever asks (a person, a bulk action)."""

from __future__ import annotations

import json
from datetime import datetime

import asyncpg

from chorus.base.tracing import request_span
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope, Priority
from chorus.contracts.lifecycle import WorkflowCancelRequested
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.outbox import OutboxTransaction
from chorus.kernel.service import RuntimeHandle
from chorus.platform.gateway.adapters import repository


def in_workflow(
    rt: RuntimeHandle,
    event: EventModel,
    workflow_id: str,
    workflow_type: str,
    submission: repository.SubmissionRow | None,
    idempotency_key: str,
    now: datetime,
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


async def ask_to_cancel(
    rt: RuntimeHandle,
    conn: asyncpg.Connection,
    workflow_id: str,
    workflow_type: str,
    submission: repository.SubmissionRow | None,
    principal: str,
    reason: str,
) -> repository.CancellationRow | None:
    """The cancel request, recorded with its workflow.cancel_requested in one transaction;
    None when one was recorded before (a workflow is asked to stop once: the first stands)."""
    async with rt.outbox.transaction(conn) as tx:
        return await cancel_in(tx, rt, workflow_id, workflow_type, submission, principal, reason)


async def cancel_in(
    tx: OutboxTransaction,
    rt: RuntimeHandle,
    workflow_id: str,
    workflow_type: str,
    submission: repository.SubmissionRow | None,
    principal: str,
    reason: str,
) -> repository.CancellationRow | None:
    """:func:`ask_to_cancel`'s writes, in the caller's transaction ``tx``."""
    now = rt.clock.now()
    asked = WorkflowCancelRequested(requested_by=principal, reason=reason)
    envelope = in_workflow(rt, asked, workflow_id, workflow_type, submission, f"cancel:{workflow_id}", now)
    request = await repository.insert_cancellation(
        tx.conn, workflow_id=workflow_id, requested_by=principal, reason=reason, now=now
    )
    if request is not None:
        await tx.publish(envelope)
    return request
