"""Report decisions: the sources stage, the drafting prompt and the validation of a draft."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from chorus.contracts.approvals import ApprovalContext, ApprovalRequested, EscalationStep, Fallback
from chorus.contracts.research import (
    GatheredSource,
    ReportDrafted,
    ReportRequested,
    ReportSection,
    SourceFetchRequested,
)
from chorus.llm import ChatMessage, reprompt
from chorus.stages import Opened, Stage, StagePolicy, open_stage

SERVICE = "report_agent"
"""The name this service publishes under (its ServiceSpec name, its consumer group)."""


TASK = "draft_report"
SOURCES_STAGE = "sources"
"""The stage id of a report's sources (one per workflow; ids are scoped to the workflow)."""
SOURCES_START = "<<<SOURCES"
SOURCES_END = "SOURCES>>>"


class ReportState(BaseModel):
    request: ReportRequested
    gathered: list[GatheredSource] = []
    """The sources the draft is built from: those that arrived by the stage's close."""
    sources: Stage | None = None
    """The sources stage (fetched in parallel by the source fetchers)."""
    draft: ReportDrafted | None = None
    approval_round: int = 0
    ended: bool = False

    closed_by: str | None = None
    """The event that closed the sources stage: it drafts (also when retried); others are late."""

    @property
    def missing(self) -> list[str]:
        return self.sources.missing if self.sources is not None else []

    def in_stage(self, stage_id: str) -> bool:
        return self.sources is not None and self.sources.stage_id == stage_id

    def stage(self) -> Stage:
        assert self.sources is not None  # callers check in_stage first
        return self.sources


def open_sources(request: ReportRequested, now: datetime) -> Opened:
    """The sources stage: one fetch per source (a name asked twice is fetched once)."""
    answer_by = now + timedelta(seconds=request.sources_within_s)
    tasks = {
        source.name: SourceFetchRequested(
            stage_id=SOURCES_STAGE, task=source.name, source=source, topic=request.topic, answer_by=answer_by
        )
        for source in request.sources
    }
    return open_stage(
        SERVICE, SOURCES_STAGE, tasks, policy=StagePolicy(request.sources_policy), deadline_at=answer_by
    )


def gathered(stage: Stage) -> list[GatheredSource]:
    """What arrived, in the order the request named the sources."""
    return [stage.result(name, GatheredSource) for name in stage.tasks if name in stage.results]


class DraftOutput(BaseModel):
    """What the model must answer (validated before anything else looks at it)."""

    title: str = Field(min_length=1, max_length=200)
    sections: list[ReportSection] = Field(min_length=1)
    citations: list[str]


def draft_prompt(state: ReportState, feedback: list[str], reviewer_comment: str = "") -> list[ChatMessage]:
    request = state.request
    system = (
        f"task: {TASK}\n"
        "You write short research reports. Answer with one JSON object: "
        '{"title": str, "sections": [{"heading": str, "body": str}], "citations": [source names]}. '
        f"Required sections: {', '.join(request.required_sections)}. At least {request.min_words} words. "
        "Cite every source by name in square brackets, e.g. [alpha]."
    )
    sources = json.dumps([g.model_dump() for g in state.gathered])
    user = f"topic: {request.topic}\n{SOURCES_START}\n{sources}\n{SOURCES_END}"
    if state.missing:
        user += f"\nunavailable sources (say so in the report): {', '.join(state.missing)}"
    return reprompt(system, user, feedback, reviewer_comment, answer="draft", reviewer="The editor asks")


def validation_errors(draft: DraftOutput, state: ReportState) -> list[str]:
    """Required sections, length and citations of every gathered source."""
    errors: list[str] = []
    headings = {s.heading.strip().lower() for s in draft.sections}
    for required in state.request.required_sections:
        if required.lower() not in headings:
            errors.append(f"/sections: missing required section {required!r}")
    words = word_count(draft)
    if words < state.request.min_words:
        errors.append(f"/sections: {words} words, at least {state.request.min_words} required")
    text = " ".join(s.body for s in draft.sections)
    for source in state.gathered:
        if source.name not in draft.citations or f"[{source.name}]" not in text:
            errors.append(f"/citations: source {source.name!r} is not cited")
    return errors


def word_count(draft: DraftOutput) -> int:
    return sum(len(s.body.split()) for s in draft.sections)


def approval_for(
    state: ReportState,
    drafted: ReportDrafted,
    workflow_id: str,
    chain: list[EscalationStep],
    fallback: Fallback,
) -> ApprovalRequested:
    missing = state.missing
    summary = f"{drafted.title} ({drafted.word_count} words, revision {drafted.revision})"
    if missing:
        total = len(state.gathered) + len(missing)
        summary += f"; {len(state.gathered)} of {total} sources, missing: {', '.join(missing)}"
    steps = [f"fetched {s.name}" for s in state.gathered]
    if state.sources is not None:
        steps += [
            f"missing {name}: {state.sources.failures.get(name, 'not there by the deadline')}"
            for name in missing
        ]
    return ApprovalRequested(
        approval_id=f"appr-{workflow_id}-{state.approval_round}",
        requested_by=SERVICE,
        chain=chain,
        fallback=fallback,
        context=ApprovalContext(
            summary=summary,
            inputs={
                "topic": state.request.topic,
                "sources": [s.name for s in state.gathered],
                "sources_missing": missing,
            },
            steps_taken=[*steps, "drafted and validated"],
            why="reports are published only after an editor approves them",
        ),
    )
