"""Handlers of the timer commands. Each returns the row change as an effect that
commits in the same transaction as the command's inbox row."""

from __future__ import annotations

from typing import Any

from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.platform import TimerCancel, TimerReschedule, TimerSchedule
from chorus.kernel.codec import Event
from chorus.kernel.service import Context, Outcome
from chorus.platform.timer_service.adapters.repository import (
    CancelTimerRow,
    CancelWorkflowTimers,
    RescheduleTimerRow,
    ScheduleTimerRow,
)


async def on_timer_schedule(event: Event[TimerSchedule], state: None, ctx: Context[Any]) -> Outcome[Any]:
    cmd = event.payload
    return Outcome(
        effects=[
            ScheduleTimerRow(
                timer_id=cmd.timer_id,
                due_at=cmd.due_at,
                topic=cmd.fire.topic,
                key=cmd.fire.key,
                envelope=cmd.fire.value,
                purpose=cmd.purpose,
                workflow_id=event.envelope.workflow_id,
                scheduled_by=event.envelope.producer.service,
                now=ctx.clock.now(),
                signature=cmd.fire.signature,
            )
        ]
    )


async def on_timer_cancel(event: Event[TimerCancel], state: None, ctx: Context[Any]) -> Outcome[Any]:
    return Outcome(
        effects=[
            CancelTimerRow(
                timer_id=event.payload.timer_id,
                reason=event.payload.reason,
                workflow_id=event.envelope.workflow_id,
                now=ctx.clock.now(),
            )
        ]
    )


async def on_timer_reschedule(event: Event[TimerReschedule], state: None, ctx: Context[Any]) -> Outcome[Any]:
    return Outcome(
        effects=[
            RescheduleTimerRow(
                timer_id=event.payload.timer_id, due_at=event.payload.due_at, now=ctx.clock.now()
            )
        ]
    )


async def on_workflow_ended(event: Event[WorkflowEnded], state: None, ctx: Context[Any]) -> Outcome[Any]:
    """Nothing waits on a workflow that ended: its deadlines, windows and reminders go."""
    reason = f"workflow ended ({event.payload.outcome})"
    return Outcome(effects=[CancelWorkflowTimers(event.envelope.workflow_id, reason, ctx.clock.now())])
