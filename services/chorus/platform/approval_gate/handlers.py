"""Handlers of the approval gate.

While a workflow waits here nothing runs: the wait is one checkpoint row and
one pending timer. Each window that elapses moves the request one tier up the
chain; past the last tier the configured fallback decides.
"""

from __future__ import annotations

from datetime import datetime

from chorus.contracts.approvals import (
    NO_TIER,
    ApprovalContext,
    ApprovalDecided,
    ApprovalDecisionSubmitted,
    ApprovalEscalated,
    ApprovalRequested,
    ApprovalRouted,
    ApprovalWindowElapsed,
)
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.platform import ReviewRequested
from chorus.kernel.codec import Event
from chorus.kernel.service import CancelTimer, Context, Outcome, ScheduleTimer
from chorus.platform.approval_gate.bootstrap import Deps
from chorus.platform.approval_gate.domain import (
    DECLARED_FALLBACK,
    FALLBACK_ACTOR,
    POLICY_ACTOR,
    REVIEW,
    Gate,
    fallback_decision,
    is_current,
    is_review,
    unrouted,
    window_end,
    window_timer_id,
)


def _window_timer(gate: Gate, start: datetime) -> ScheduleTimer:
    return ScheduleTimer(
        timer_id=window_timer_id(gate.approval_id, gate.level),
        due_at=window_end(start, gate),
        event=ApprovalWindowElapsed(approval_id=gate.approval_id, level=gate.level),
        purpose="escalation",
    )


async def on_approval_requested(
    event: Event[ApprovalRequested], state: Gate | None, ctx: Context[Deps]
) -> Outcome[Gate]:
    request = event.payload
    if state is not None and state.approval_id == request.approval_id:
        return Outcome()  # the same request again
    producer = event.envelope.producer.service
    if producer not in (ctx.service, request.requested_by):
        # Its signer asks in another service's name (the decision would resume that one).
        ctx.log.warning("approval.requested by %s in the name of %s; ignored", producer, request.requested_by)
        return Outcome()
    emit: list[ApprovalDecided] = []
    if state is not None and state.status == "pending" and state.requested_by != request.requested_by:
        # A new round supersedes its own requester's approval. Across requesters a service's
        # own request outranks a review (any runtime may ask for one about its own output,
        # for any workflow): a review never takes the slot of the manager's payment approval,
        # nor can one taken first keep it.
        if not is_review(state.approval_id) or is_review(request.approval_id):
            why = f"an approval {state.requested_by} asked for is pending in this workflow"
            return Outcome(emit=[_refusal(request, why)])
        emit.append(_refusal(state, f"superseded by the approval {request.requested_by} asked for"))
    timers: list[CancelTimer | ScheduleTimer] = []
    if state is not None and state.status == "pending":
        timers.append(CancelTimer(window_timer_id(state.approval_id, state.level), "superseded"))
    # The policy in force now routes it (read for every approval: a change needs no restart);
    # where no rule matches, the workflow type's declared chain. Never the chain or fallback
    # the request names: a requester (or whoever took its key) would pick the tier that
    # decides, a window that runs out at once, and an approval when it does.
    workflow_type = event.envelope.workflow_type
    policy = await ctx.deps.policies.current()
    rule = policy.policy.route(workflow_type, request.requested_by, request.facts)
    if rule is not None:
        chain, fallback = rule.chain, rule.fallback
    elif producer == ctx.service:
        chain, fallback = request.chain, request.fallback  # a review the gate asked for: its own
    elif workflow_type in ctx.deps.chains:
        chain, fallback = list(ctx.deps.chains[workflow_type]), DECLARED_FALLBACK
    else:
        # Nothing the gate trusts says who decides: rejected at once, saying so, so the
        # requester compensates instead of waiting on a tier nobody chose.
        refused = _refusal(request, unrouted(workflow_type, policy.version))
        return Outcome(state=_closed(request, policy.version), emit=[*emit, refused], timers=timers)
    gate = Gate(
        approval_id=request.approval_id,
        requested_by=request.requested_by,
        chain=chain,
        fallback=fallback,
        context=request.context,
        policy_version=policy.version,
        rule=rule.name if rule else None,
    )
    routed = ApprovalRouted(
        approval_id=gate.approval_id,
        chain=gate.chain,
        fallback=gate.fallback,
        policy_version=gate.policy_version,
        rule=gate.rule,
    )
    # The first window runs on this gate's clock, from when it routed the request: the time
    # a request states is its requester's word, and a backdated one would skip a reviewer's
    # window (nor does a gate that was down shorten it).
    return Outcome(state=gate, emit=[*emit, routed], timers=[*timers, _window_timer(gate, ctx.clock.now())])


def _closed(request: ApprovalRequested, policy_version: int) -> Gate:
    """The workflow's approval once refused: decided, with no tier to wait on."""
    return Gate(
        approval_id=request.approval_id,
        requested_by=request.requested_by,
        chain=[],
        fallback=DECLARED_FALLBACK,
        status="decided",
        context=request.context,
        policy_version=policy_version,
    )


def _refusal(request: ApprovalRequested | Gate, why: str) -> ApprovalDecided:
    return ApprovalDecided(
        approval_id=request.approval_id,
        decision="reject",
        comment=why,
        decided_by=POLICY_ACTOR,
        tier=NO_TIER,
        automatic=True,
        requested_by=request.requested_by,
    )


async def on_approval_window_elapsed(
    event: Event[ApprovalWindowElapsed], state: Gate | None, ctx: Context[Deps]
) -> Outcome[Gate]:
    elapsed = event.payload
    if state is None or not is_current(state, elapsed.approval_id) or state.level != elapsed.level:
        return Outcome()  # decided, superseded or already escalated
    if state.level + 1 < len(state.chain):
        # The next tier is told now (the escalation event), so its window starts now.
        now = ctx.clock.now()
        gate = state.model_copy(update={"level": state.level + 1})
        escalated = ApprovalEscalated(
            approval_id=gate.approval_id,
            level=gate.level,
            from_tier=state.chain[state.level].tier,
            to_tier=gate.chain[gate.level].tier,
            waiting_until=window_end(now, gate),
        )
        return Outcome(state=gate, emit=[escalated], timers=[_window_timer(gate, now)])
    decided = ApprovalDecided(
        approval_id=state.approval_id,
        decision=fallback_decision(state.fallback),
        comment=f"no answer from {' / '.join(s.tier for s in state.chain)} in time",
        decided_by=FALLBACK_ACTOR,
        tier=state.chain[state.level].tier,
        automatic=True,
        requested_by=state.requested_by,
    )
    return Outcome(state=state.model_copy(update={"status": "decided"}), emit=[decided])


async def on_approval_decision_submitted(
    event: Event[ApprovalDecisionSubmitted], state: Gate | None, ctx: Context[Deps]
) -> Outcome[Gate]:
    submitted = event.payload
    if state is None or not is_current(state, submitted.approval_id):
        ctx.log.warning("decision for an approval that is not pending; ignored")
        return Outcome()
    tier = state.chain[state.level].tier
    if submitted.reviewer_tier != tier:
        # The gateway answers 403 first; this guards against a race with an escalation.
        ctx.log.warning("decision from tier %s while %s decides; ignored", submitted.reviewer_tier, tier)
        return Outcome()
    decided = ApprovalDecided(
        approval_id=state.approval_id,
        decision=submitted.decision,
        comment=submitted.comment,
        decided_by=submitted.reviewer,
        tier=tier,
        requested_by=state.requested_by,
    )
    return Outcome(
        state=state.model_copy(update={"status": "decided"}),
        emit=[decided],
        timers=[CancelTimer(window_timer_id(state.approval_id, state.level), "decided")],
    )


async def on_review_requested(
    event: Event[ReviewRequested], state: Gate | None, ctx: Context[Deps]
) -> Outcome[Gate]:
    """Output a handler could not get right becomes an approval for a person."""
    review = event.payload
    request = ApprovalRequested(
        approval_id=f"{REVIEW}{event.envelope.workflow_id}-{review.original_event_id[:8]}",
        requested_by=review.service,
        chain=ctx.deps.review_chain,
        fallback=ctx.deps.review_fallback,
        context=ApprovalContext(
            summary=f"{review.service} could not produce valid output for {review.original_event_type}",
            inputs={"validation_errors": review.validation_errors, "attempts": review.attempts},
            steps_taken=[f"{review.attempts} attempts, each re-prompted with the previous errors"],
            options=["approve", "reject", "revise"],
            why=review.reason,
        ),
    )
    return Outcome(emit=[request])


async def on_workflow_ended(
    event: Event[WorkflowEnded], state: Gate | None, ctx: Context[Deps]
) -> Outcome[Gate]:
    if state is None or state.status != "pending":
        return Outcome()
    return Outcome(
        state=state.model_copy(update={"status": "closed"}),
        timers=[CancelTimer(window_timer_id(state.approval_id, state.level), "workflow ended")],
    )
