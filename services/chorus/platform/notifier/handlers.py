"""The notifier's handlers: each decides who is told what, and returns it as deliveries
written in the event's own transaction (chorus.kernel.service Effects). Sending happens in the
delivery loop (delivery.py), so a mail server that is down delays messages, never the
workflow and never this service's other events."""

from __future__ import annotations

from datetime import datetime, timedelta

from chorus.contracts.approvals import ApprovalDecided, ApprovalEscalated, ApprovalRouted
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import WorkflowEnded, WorkflowStarted
from chorus.kernel.codec import Event
from chorus.kernel.service import Context, Outcome
from chorus.platform.notifier.adapters.deliveries import PlanDeliveries, SupersedeDeliveries
from chorus.platform.notifier.bootstrap import Deps
from chorus.platform.notifier.domain import (
    Notice,
    NoticeKind,
    NotifierState,
    OpenApproval,
    recipients,
    submitter_recipients,
)


def _tell(
    envelope: Envelope,
    ctx: Context[Deps],
    kind: NoticeKind,
    approval_id: str,
    approval: OpenApproval,
    *,
    waiting_until: datetime | None = None,
    outcome: str | None = None,
) -> PlanDeliveries:
    """The deliveries telling ``approval``'s tier about it (``kind``)."""
    notice = Notice(
        kind=kind,
        workflow_id=envelope.workflow_id,
        workflow_type=envelope.workflow_type,
        approval_id=approval_id,
        tier=approval.tier,
        level=approval.level,
        waiting_until=waiting_until,
        outcome=outcome,
        # Sent later by the delivery loop, in the workflow's trace all the same.
        traceparent=envelope.traceparent,
    )
    return PlanDeliveries(
        event_id=str(envelope.event_id),
        notice=notice,
        recipients=recipients(notice.tier, ctx.deps.reviewers, ctx.deps.tier_webhooks),
        now=ctx.clock.now(),
    )


def _tell_submitter(
    envelope: Envelope,
    state: NotifierState | None,
    ctx: Context[Deps],
    kind: NoticeKind,
    *,
    approval_id: str = "",
    approval: OpenApproval | None = None,
    waiting_until: datetime | None = None,
    outcome: str | None = None,
) -> list[PlanDeliveries]:
    """The deliveries telling the workflow's submitter (``kind``), if they are to hear it."""
    principal = state.submitter if state else None
    submitter = ctx.deps.submitters.get(principal) if principal else None
    if principal is None or submitter is None:
        return []
    if kind is NoticeKind.SUBMISSION_WAITING and not submitter.when_waiting:
        return []
    notice = Notice(
        kind=kind,
        workflow_id=envelope.workflow_id,
        workflow_type=envelope.workflow_type,
        approval_id=approval_id,
        tier=approval.tier if approval else "",
        level=approval.level if approval else 0,
        waiting_until=waiting_until,
        outcome=outcome,
        traceparent=envelope.traceparent,
    )
    found = submitter_recipients(principal, email=bool(submitter.email), webhook=bool(submitter.webhook))
    return [
        PlanDeliveries(event_id=str(envelope.event_id), notice=notice, recipients=found, now=ctx.clock.now())
    ]


async def on_workflow_started(
    event: Event[WorkflowStarted], state: NotifierState | None, ctx: Context[Deps]
) -> Outcome[NotifierState]:
    """Remember who submitted it, when CHORUS_SUBMITTERS can reach them (nobody else's name
    is kept)."""
    principal = event.payload.submitted_by
    if principal not in ctx.deps.submitters:
        return Outcome()
    current = state or NotifierState()
    return Outcome(state=current.model_copy(update={"submitter": principal}))


def _opened(state: NotifierState | None, approval_id: str, approval: OpenApproval) -> NotifierState:
    """The state with ``approval`` open (at its tier and level now)."""
    current = state or NotifierState()
    return current.model_copy(update={"approvals": {**current.approvals, approval_id: approval}})


async def on_approval_routed(
    event: Event[ApprovalRouted], state: NotifierState | None, ctx: Context[Deps]
) -> Outcome[NotifierState]:
    """The gate chose the chain (approval.requested's, or its policy's): tell the first tier."""
    routed, envelope = event.payload, event.envelope
    first = routed.chain[0]
    waiting = OpenApproval(tier=first.tier, level=0)
    # The gate's window runs from the request, which the routing follows at once.
    until = envelope.occurred_at + timedelta(seconds=first.window_s)
    tell = _tell(envelope, ctx, NoticeKind.WAITING, routed.approval_id, waiting, waiting_until=until)
    submitter = _tell_submitter(
        envelope,
        state,
        ctx,
        NoticeKind.SUBMISSION_WAITING,
        approval_id=routed.approval_id,
        approval=waiting,
        waiting_until=until,
    )
    return Outcome(state=_opened(state, routed.approval_id, waiting), effects=[tell, *submitter])


async def on_approval_escalated(
    event: Event[ApprovalEscalated], state: NotifierState | None, ctx: Context[Deps]
) -> Outcome[NotifierState]:
    """The tier's window passed: its unsent messages are moot; tell the next tier."""
    escalated, envelope = event.payload, event.envelope
    approval_id, until = escalated.approval_id, escalated.waiting_until
    waiting = OpenApproval(tier=escalated.to_tier, level=escalated.level)
    moot = SupersedeDeliveries(
        envelope.workflow_id, approval_id, f"escalated to {escalated.to_tier}", ctx.clock.now()
    )
    tell = _tell(envelope, ctx, NoticeKind.ESCALATED, approval_id, waiting, waiting_until=until)
    return Outcome(state=_opened(state, approval_id, waiting), effects=[moot, tell])


async def on_approval_decided(
    event: Event[ApprovalDecided], state: NotifierState | None, ctx: Context[Deps]
) -> Outcome[NotifierState]:
    """Decided: nothing more to tell anyone about it."""
    decided, envelope = event.payload, event.envelope
    current = state or NotifierState()
    opened = {k: v for k, v in current.approvals.items() if k != decided.approval_id}
    moot = SupersedeDeliveries(envelope.workflow_id, decided.approval_id, "decided", ctx.clock.now())
    return Outcome(state=current.model_copy(update={"approvals": opened}), effects=[moot])


async def on_workflow_ended(
    event: Event[WorkflowEnded], state: NotifierState | None, ctx: Context[Deps]
) -> Outcome[NotifierState]:
    """The workflow ended with approvals still open: whoever was told last hears that
    there is nothing to decide; messages not yet sent are moot. Its submitter hears how it
    ended."""
    envelope, now = event.envelope, ctx.clock.now()
    effects: list[SupersedeDeliveries | PlanDeliveries] = [
        SupersedeDeliveries(envelope.workflow_id, None, f"workflow ended ({event.payload.outcome})", now)
    ]
    for approval_id, approval in sorted((state or NotifierState()).approvals.items()):
        outcome = event.payload.outcome
        effects.append(_tell(envelope, ctx, NoticeKind.WITHDRAWN, approval_id, approval, outcome=outcome))
    outcome = event.payload.outcome
    effects += _tell_submitter(envelope, state, ctx, NoticeKind.SUBMISSION_ENDED, outcome=outcome)
    return Outcome(effects=effects)
