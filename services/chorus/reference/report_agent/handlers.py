"""Handlers of the report agent."""

from __future__ import annotations

import dataclasses

from chorus.codec import Event
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import StageDeadlineReached, WorkflowEnded
from chorus.contracts.research import (
    GatheredSource,
    ReportDelivered,
    ReportDrafted,
    ReportRequested,
    SourceFetched,
    SourceFetchFailed,
)
from chorus.errors import SemanticError
from chorus.llm import parse_json_output
from chorus.reference.report_agent.bootstrap import Deps
from chorus.reference.report_agent.domain import (
    SERVICE,
    DraftOutput,
    ReportState,
    approval_for,
    draft_prompt,
    gathered,
    open_sources,
    validation_errors,
    word_count,
)
from chorus.service import Context, Outcome
from chorus.stages import Stage, StageStatus, stop_deadline
from chorus.tracing import link


async def on_report_requested(
    event: Event[ReportRequested], state: ReportState | None, ctx: Context[Deps]
) -> Outcome[ReportState]:
    """Fan out: every source is fetched at once (by the source fetchers), and the
    stage's deadline is a durable timer. The stage lives in this checkpoint."""
    if state is not None and (state.sources is not None or state.draft is not None):
        return Outcome()  # a redelivered request: the stage is open, or done already
    opened = open_sources(event.payload, ctx.clock.now())
    return Outcome(
        state=ReportState(request=event.payload, sources=opened.stage),
        emit=opened.emit,
        timers=[opened.timer],
    )


async def on_source_fetched(
    event: Event[SourceFetched], state: ReportState | None, ctx: Context[Deps]
) -> Outcome[ReportState]:
    return await source_reported(event, state, ctx, result=event.payload.source)


async def on_source_fetch_failed(
    event: Event[SourceFetchFailed], state: ReportState | None, ctx: Context[Deps]
) -> Outcome[ReportState]:
    return await source_reported(event, state, ctx, failure=event.payload.reason)


async def source_reported(
    event: Event[SourceFetched] | Event[SourceFetchFailed],
    state: ReportState | None,
    ctx: Context[Deps],
    *,
    result: GatheredSource | None = None,
    failure: str = "",
) -> Outcome[ReportState]:
    """A source's result or failure, recorded in the stage it was fetched for (a report for
    another stage, or with none open, changes nothing)."""
    report = event.payload
    if state is None or not state.in_stage(report.stage_id):
        return Outcome()
    traceparent = event.envelope.traceparent
    stage = state.stage().record(report.task, ctx.clock.now(), result, failure, traceparent)
    return await after_sources(state, stage, event.envelope, ctx)


async def on_stage_deadline_reached(
    event: Event[StageDeadlineReached], state: ReportState | None, ctx: Context[Deps]
) -> Outcome[ReportState]:
    due = event.payload
    if due.service != SERVICE or state is None or not state.in_stage(due.stage_id):
        return Outcome()
    return await after_sources(state, state.stage().expire(ctx.clock.now()), event.envelope, ctx)


async def after_sources(
    state: ReportState, stage: Stage, envelope: Envelope, ctx: Context[Deps]
) -> Outcome[ReportState]:
    """Fan in: record the stage; once it closes, draft from what arrived (or end the
    workflow failed). The event that closed it drafts, also on its retries; any other
    report after the close is kept in the stage as late and changes nothing."""
    closing = str(envelope.event_id)
    if stage.is_open or (not state.stage().is_open and state.closed_by != closing):
        return Outcome(state=state.model_copy(update={"sources": stage}))
    # What follows the stage has every report as a cause: the trace shows them all.
    link(stage.reported_by.values())
    if state.closed_by != closing:
        # Closed now: kept at once, so a draft that ends in a person's review (or a crash)
        # finds the stage closed and the sources it is built from.
        state = state.model_copy(update={"sources": stage, "closed_by": closing, "gathered": gathered(stage)})
        await ctx.checkpoint(state)
    stop = [stop_deadline(stage)]  # a no-op when the deadline is what closed it
    if state.draft is not None or state.ended:
        return Outcome(state=state, timers=stop)
    if stage.status is StageStatus.FAILED:
        ended = WorkflowEnded(
            outcome="failed",
            reason=f"sources stage {stage.why}",
            result={"sources_missing": stage.missing},
            ended_by=SERVICE,
        )
        failed = state.model_copy(update={"ended": True})
        return Outcome(state=failed, emit=[ended], timers=stop, ended="failed")
    drafting = await draft_and_ask(state, envelope.workflow_id, ctx)
    return dataclasses.replace(drafting, timers=[*drafting.timers, *stop])


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
        sources_missing=state.missing,
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
            "sources_missing": state.missing,
        },
        ended_by=SERVICE,
    )
    return Outcome(state=state.model_copy(update={"ended": True}), emit=[delivered, ended], ended="completed")
