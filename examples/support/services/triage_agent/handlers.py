"""Handlers of triage_agent: one plain async function per event it reacts to."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from chorus.codec import Event
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.errors import SemanticError
from chorus.llm import parse_json_output
from chorus.service import CancelTimer, Context, Outcome, ScheduleTimer

from support_contracts.events import TicketAnswered, TicketReceived, TicketReplyDue
from triage_agent.bootstrap import Deps
from triage_agent.domain import (
    SERVICE,
    Triage,
    TriageState,
    approval_for,
    looked_up,
    semantic_errors,
    triage_prompt,
)

REPLY_DUE = "reply-due"


async def on_ticket_received(
    event: Event[TicketReceived], state: TriageState | None, ctx: Context[Deps]
) -> Outcome[TriageState]:
    """Let the model triage the ticket with the CRM's tools (the customer, their orders, a
    note), check its answer; then send the reply, or ask a person first when the refund is
    large. Each model turn and tool call is kept as it completes: a crash goes on from there,
    asking the model nothing twice. The runtime commits the new state, the emitted events and
    the timer in one transaction with the fact that this event was handled: a redelivery is
    not handled twice."""
    ticket = event.payload
    transcript = await ctx.deps.agent.run(
        ctx,
        triage_prompt(ticket),
        state.transcript if state is not None else None,
        keep=lambda kept: TriageState(ticket=ticket, transcript=kept),
        refused=ctx.feedback,  # a semantic retry: the model is told what was wrong
    )
    triage = parse_json_output(transcript.answer or "", Triage)
    customer, orders = looked_up(transcript, ticket.customer_id)
    errors = semantic_errors(triage, ticket, customer, orders)
    if errors:
        # Told to the model on the retry (ctx.feedback); if it stays wrong, a person reviews.
        raise SemanticError("the triage does not fit the ticket", errors)
    state = TriageState(ticket=ticket, transcript=transcript, customer=customer, triage=triage)
    # The loop goes out with the step: each turn (what the model saw and said, sealed) and
    # what it spent, for the workflow's timeline, its status, the console and the CLI.
    recorded = transcript.recorded(SERVICE, "triage", triage_prompt(ticket))
    if triage.refund_cents <= ctx.deps.refund_threshold_cents:
        answered = await reply(state, ctx)
        return dataclasses.replace(answered, emit=[*recorded, *answered.emit])
    due = ScheduleTimer(
        REPLY_DUE,
        due_at=ctx.clock.now() + timedelta(seconds=ctx.deps.reply_within_s),
        event=TicketReplyDue(due_within_s=ctx.deps.reply_within_s),
    )
    asking = state.model_copy(update={"waiting_for_approval": True})
    request = approval_for(state, event.envelope.workflow_id, ctx.deps.approval_chain)
    return Outcome(state=asking, emit=[*recorded, request], timers=[due])


async def on_approval_decided(
    event: Event[ApprovalDecided], state: TriageState | None, ctx: Context[Deps]
) -> Outcome[TriageState]:
    decision = event.payload
    if decision.requested_by != SERVICE or state is None or not state.waiting_for_approval:
        return Outcome()  # another service's approval, or decided already
    if decision.decision == "approve":
        return await reply(state, ctx)
    ended = WorkflowEnded(
        outcome="rejected", reason=f"refund rejected by {decision.decided_by}", ended_by=SERVICE
    )
    done = state.model_copy(update={"waiting_for_approval": False})
    return Outcome(state=done, emit=[ended], timers=[CancelTimer(REPLY_DUE)], ended="rejected")


async def on_ticket_reply_due(
    event: Event[TicketReplyDue], state: TriageState | None, ctx: Context[Deps]
) -> Outcome[TriageState]:
    """The reply is late: remember it, so the answer says so (and the audit log shows when)."""
    if state is None or state.answered:
        return Outcome()
    ctx.log.warning("ticket overdue: no reply within %ss", event.payload.due_within_s)
    return Outcome(state=state.model_copy(update={"overdue": True}))


async def reply(state: TriageState, ctx: Context[Deps]) -> Outcome[TriageState]:
    """Send the reply (once, whatever retries: the step's idempotency key) and end the workflow."""
    customer, triage = state.decided()
    reply_id = await ctx.deps.helpdesk.send(
        customer.customer_id, triage.reply, key=ctx.idempotency_key("reply")
    )
    answered = TicketAnswered(
        category=triage.category,
        reply=triage.reply,
        refund_cents=triage.refund_cents,
        reply_id=reply_id,
        overdue=state.overdue,
    )
    ended = WorkflowEnded(
        outcome="completed",
        reason=f"answered ({triage.category})",
        result={"reply_id": reply_id, "refund_cents": triage.refund_cents, "overdue": state.overdue},
        ended_by=SERVICE,
    )
    done = state.model_copy(update={"answered": True, "waiting_for_approval": False})
    return Outcome(state=done, emit=[answered, ended], timers=[CancelTimer(REPLY_DUE)], ended="completed")
