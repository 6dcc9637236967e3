"""Handlers of the report agent."""

from __future__ import annotations

from chorus.codec import Event
from chorus.errors import SemanticError
from chorus.llm import parse_json_output
from chorus.service import Context, Outcome
from chorus_contracts.approvals import ApprovalDecided
from chorus_contracts.lifecycle import WorkflowEnded
from chorus_contracts.research import ReportDelivered, ReportDrafted, ReportRequested
from report_agent.bootstrap import Deps
from report_agent.domain import (
    SERVICE,
    DraftOutput,
    ReportState,
    approval_for,
    draft_prompt,
    validation_errors,
    word_count,
)


async def on_report_requested(
    event: Event[ReportRequested], state: ReportState | None, ctx: Context[Deps]
) -> Outcome[ReportState]:
    if state is not None and state.draft is not None:
        return Outcome()  # drafted already; a redelivered request changes nothing
    state = state or ReportState(request=event.payload)
    # One source at a time, checkpointed after each: after a crash (or a failing
    # source's durable retry) the sources already gathered are not asked again.
    for source in state.request.sources:
        if state.has(source.name):
            continue
        gathered = await ctx.deps.sources.fetch(source, state.request.topic)
        state = state.model_copy(update={"gathered": [*state.gathered, gathered]})
        await ctx.checkpoint(state)
    return await draft_and_ask(state, event.envelope.workflow_id, ctx)


async def on_approval_decided(
    event: Event[ApprovalDecided], state: ReportState | None, ctx: Context[Deps]
) -> Outcome[ReportState]:
    decision = event.payload
    if state is None or decision.requested_by != SERVICE or state.ended:
        return Outcome()
    workflow_id = event.envelope.workflow_id
    if decision.decision == "reject":
        ended = WorkflowEnded(
            outcome="rejected",
            reason=f"rejected by {decision.decided_by}: {decision.comment}".strip(),
            ended_by=SERVICE,
        )
        return Outcome(state=state.model_copy(update={"ended": True}), emit=[ended], ended="rejected")
    if decision.decision == "revise" or state.draft is None:
        return await draft_and_ask(state, workflow_id, ctx, reviewer_comment=decision.comment)
    return await deliver(state, workflow_id, ctx)


async def draft_and_ask(
    state: ReportState, workflow_id: str, ctx: Context[Deps], reviewer_comment: str = ""
) -> Outcome[ReportState]:
    answer = await ctx.deps.llm.complete(
        draft_prompt(state, ctx.feedback, reviewer_comment), timeout_s=ctx.deps.llm_timeout_s
    )
    draft = parse_json_output(answer, DraftOutput)
    errors = validation_errors(draft, state)
    if errors:
        raise SemanticError("draft does not meet the report's requirements", errors)
    drafted = ReportDrafted(
        title=draft.title,
        sections=draft.sections,
        citations=draft.citations,
        word_count=word_count(draft),
        sources_used=state.gathered,
        revision=(state.draft.revision + 1) if state.draft else 1,
    )
    state = state.model_copy(update={"draft": drafted, "approval_round": state.approval_round + 1})
    request = approval_for(state, drafted, workflow_id, ctx.deps.chain, ctx.deps.fallback)
    return Outcome(state=state, emit=[drafted, request])


async def deliver(state: ReportState, workflow_id: str, ctx: Context[Deps]) -> Outcome[ReportState]:
    assert state.draft is not None
    target = state.request.delivery_url
    status = 0
    if target:
        status = await ctx.deps.delivery.deliver(
            target, state.draft.model_dump(mode="json"), key=ctx.idempotency_key("delivery")
        )
    delivered = ReportDelivered(
        delivered_to=target or "(none requested)",
        status_code=status,
        word_count=state.draft.word_count,
    )
    ended = WorkflowEnded(
        outcome="completed",
        reason="report approved and delivered",
        result={
            "title": state.draft.title,
            "word_count": state.draft.word_count,
            "delivered_to": target,
        },
        ended_by=SERVICE,
    )
    return Outcome(state=state.model_copy(update={"ended": True}), emit=[delivered, ended], ended="completed")
