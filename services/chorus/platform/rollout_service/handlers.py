"""Handlers: what the rollout service learns about the workflows of each release.

All of them only record (effects in the event's transaction); the status and the
automatic-rollback rule read what they recorded.
"""

from __future__ import annotations

import uuid
from typing import Any

from chorus.base.errors import PersistentError
from chorus.contracts.lifecycle import WorkflowEnded, WorkflowStarted
from chorus.contracts.platform import EventDeadLettered, ReviewRequested, bulk_reason
from chorus.contracts.rollouts import ReleaseReported, RepinAnswered, RepinOrdered
from chorus.kernel.codec import Event
from chorus.kernel.service import Context, Outcome
from chorus.platform.rollout_service.adapters.repository import (
    RecordEnd,
    RecordFailure,
    RecordPins,
    RecordRepinAnswer,
    RecordReport,
    RepinOrder,
)


async def on_workflow_started(event: Event[WorkflowStarted], state: None, ctx: Context[Any]) -> Outcome[Any]:
    """Which release of each service the new workflow is pinned to (none: not counted)."""
    env = event.envelope
    if not env.pins:
        return Outcome()
    return Outcome(effects=[RecordPins(env.workflow_id, env.workflow_type, dict(env.pins), env.occurred_at)])


async def on_workflow_ended(event: Event[WorkflowEnded], state: None, ctx: Context[Any]) -> Outcome[Any]:
    env = event.envelope
    return Outcome(effects=[RecordEnd(env.workflow_id, event.payload.outcome, env.occurred_at)])


async def on_event_dead_lettered(
    event: Event[EventDeadLettered], state: None, ctx: Context[Any]
) -> Outcome[Any]:
    """A dead letter counts against the release that wrote it (its service version)."""
    letter, env = event.payload, event.envelope
    workflow_id = letter.original_workflow_id or env.workflow_id
    failure = RecordFailure(
        env.event_id,
        workflow_id,
        letter.service,
        letter.service_version,
        letter.error.category,
        dead_letter=True,
        at=env.occurred_at,
    )
    return Outcome(effects=[failure])


async def on_review_requested(event: Event[ReviewRequested], state: None, ctx: Context[Any]) -> Outcome[Any]:
    """Output that kept failing validation: a semantic failure of the release that produced it."""
    env = event.envelope
    failure = RecordFailure(
        env.event_id,
        env.workflow_id,
        event.payload.service,
        env.producer.version,
        "semantic",
        dead_letter=False,
        at=env.occurred_at,
    )
    return Outcome(effects=[failure])


async def on_release_reported(event: Event[ReleaseReported], state: None, ctx: Context[Any]) -> Outcome[Any]:
    return Outcome(effects=[RecordReport(event.envelope.event_id, event.payload)])


async def on_repin_answered(event: Event[RepinAnswered], state: None, ctx: Context[Any]) -> Outcome[Any]:
    """The owning release moved a workflow to another release, or refused and said why."""
    env, answer = event.envelope, event.payload
    try:
        request_id = uuid.UUID(answer.request_id)
    except ValueError as exc:
        raise PersistentError(f"/payload/request_id: not a UUID ({exc})") from None
    return Outcome(effects=[RecordRepinAnswer(request_id, env.workflow_id, answer, env.occurred_at)])


async def on_repin_ordered(event: Event[RepinOrdered], state: None, ctx: Context[Any]) -> Outcome[Any]:
    """An operator's order (through the gateway) to move a workflow: kept, for the repin
    worker to check and ask for as the operator (chorus.platform.rollout_service.changes)."""
    env, order = event.envelope, event.payload
    reason = bulk_reason(order.reason, order.bulk_id)
    kept = RepinOrder(
        env.event_id,
        order.service,
        env.workflow_id,
        order.to_release,
        order.requested_by,
        reason,
        ctx.clock.now(),
    )
    return Outcome(effects=[kept])
