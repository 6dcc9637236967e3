"""Report decisions: the drafting prompt and the validation of a draft."""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

from chorus.llm import ChatMessage, reprompt
from chorus_contracts.approvals import ApprovalContext, ApprovalRequested, EscalationStep, Fallback
from chorus_contracts.research import GatheredSource, ReportDrafted, ReportRequested, ReportSection

SERVICE = "report_agent"
"""The name this service publishes under (its ServiceSpec name, its consumer group)."""


TASK = "draft_report"
SOURCES_START = "<<<SOURCES"
SOURCES_END = "SOURCES>>>"


class ReportState(BaseModel):
    request: ReportRequested
    gathered: list[GatheredSource] = []
    draft: ReportDrafted | None = None
    approval_round: int = 0
    ended: bool = False

    def has(self, name: str) -> bool:
        return any(g.name == name for g in self.gathered)


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
    return ApprovalRequested(
        approval_id=f"appr-{workflow_id}-{state.approval_round}",
        requested_by=SERVICE,
        chain=chain,
        fallback=fallback,
        context=ApprovalContext(
            summary=f"{drafted.title} ({drafted.word_count} words, revision {drafted.revision})",
            inputs={"topic": state.request.topic, "sources": [s.name for s in state.gathered]},
            steps_taken=[f"gathered {s.name}" for s in state.gathered] + ["drafted and validated"],
            why="reports are published only after an editor approves them",
        ),
    )
