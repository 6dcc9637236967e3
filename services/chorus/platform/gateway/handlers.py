"""Handlers of the gateway: completion webhooks, the workflow-level deadline, cancel, and
schedules' timers."""

from __future__ import annotations

from chorus.contracts.lifecycle import (
    ScheduleDue,
    WorkflowCancelRequested,
    WorkflowDeadlineReached,
    WorkflowEnded,
    WorkflowStarted,
)
from chorus.kernel.codec import Event
from chorus.kernel.service import Context, Outcome
from chorus.platform.gateway.adapters.schedules import RecordDue
from chorus.platform.gateway.adapters.webhooks import WebhookSender
from chorus.platform.gateway.domain import SERVICE, GatewayState


async def on_workflow_started(
    event: Event[WorkflowStarted], state: GatewayState | None, ctx: Context[WebhookSender]
) -> Outcome[GatewayState]:
    if state is not None:
        return Outcome()
    return Outcome(state=GatewayState(callback_url=event.payload.callback_url))


async def on_workflow_ended(
    event: Event[WorkflowEnded], state: GatewayState | None, ctx: Context[WebhookSender]
) -> Outcome[GatewayState]:
    """Tell the submitter. A failing callback is retried with durable backoff (TransientError)."""
    ended = event.payload
    if state is None or state.ended:
        return Outcome()  # not started here, or told already
    env = event.envelope
    if state.callback_url:
        await ctx.deps.send(
            state.callback_url,
            {
                "workflow_id": env.workflow_id,
                "workflow_type": env.workflow_type,
                "outcome": ended.outcome,
                "reason": ended.reason,
                "result": ended.result,
                "ended_at": env.occurred_at.isoformat(),
            },
            delivery_id=str(env.event_id),
            now=ctx.clock.now(),
        )
    return Outcome(state=state.model_copy(update={"ended": True, "outcome": ended.outcome}))


async def on_workflow_deadline_reached(
    event: Event[WorkflowDeadlineReached], state: GatewayState | None, ctx: Context[WebhookSender]
) -> Outcome[GatewayState]:
    """A workflow still running at its deadline ends with a clear terminal status."""
    if state is None or state.ended:
        return Outcome()
    ended = WorkflowEnded(
        outcome="timed_out",
        reason=f"workflow deadline {event.payload.deadline_at.isoformat()} passed",
        ended_by=SERVICE,
    )
    return Outcome(emit=[ended], ended="timed_out")


async def on_workflow_cancel_requested(
    event: Event[WorkflowCancelRequested], state: GatewayState | None, ctx: Context[WebhookSender]
) -> Outcome[GatewayState]:
    """A cancel request ends a running workflow as ``cancelled``; every service that keeps
    its state stops, and compensates where the saga says (the budget agent releases).
    A workflow that ended first is not touched (the runtime drops the request)."""
    if state is not None and state.ended:
        return Outcome()
    asked = event.payload
    ended = WorkflowEnded(
        outcome="cancelled",
        reason=f"cancelled by {asked.requested_by}: {asked.reason}",
        # Who and why are personal data: in the (sealed) reason only, never in the result.
        result={"cancelled": True},
        ended_by=SERVICE,
    )
    return Outcome(emit=[ended], ended="cancelled")


async def on_schedule_due(
    event: Event[ScheduleDue], state: GatewayState | None, ctx: Context[WebhookSender]
) -> Outcome[GatewayState]:
    """A schedule's timer fell due (late, after an outage): the runs due since its last one
    are recorded with the event's inbox row, and the schedule worker acts on them and arms
    the next timer."""
    due = event.payload
    return Outcome(effects=[RecordDue(due.schedule_id, due.due_at, ctx.clock.now())])
