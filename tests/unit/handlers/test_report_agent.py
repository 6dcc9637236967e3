"""The report agent gathers each source once, drafts, asks an editor, delivers."""

from __future__ import annotations

import pytest

from chorus.external import ExternalRejection
from chorus.testing import WorkflowHarness
from chorus_contracts.approvals import ApprovalDecided, ApprovalRequested, Decision, EscalationStep
from chorus_contracts.lifecycle import WorkflowEnded
from chorus_contracts.research import ReportDelivered, ReportDrafted, ReportRequested, SourceRef
from report_agent.bootstrap import Deps
from report_agent.service import SPEC
from tests.support.fakes import FakeDelivery, FakeSources, model

EXCERPTS = {"alpha": "Qubits sind fragil.", "gamma": "誤り訂正が鍵です。"}


def requested(delivery_url: str | None = "https://reports.example.test/in") -> ReportRequested:
    return ReportRequested(
        topic="量子計算の現状",
        sources=[SourceRef(name=n, url=f"https://sources.example.test/{n}") for n in EXCERPTS],
        min_words=20,
        delivery_url=delivery_url,
    )


def decided(decision: Decision, comment: str = "") -> ApprovalDecided:
    return ApprovalDecided(
        approval_id="appr-1",
        decision=decision,
        comment=comment,
        decided_by="lee.editor",
        tier="editor",
        requested_by="report_agent",
    )


@pytest.fixture
def parts() -> tuple[FakeSources, FakeDelivery]:
    return FakeSources(EXCERPTS), FakeDelivery()


@pytest.fixture
def agent(parts: tuple[FakeSources, FakeDelivery]) -> WorkflowHarness:
    sources, delivery = parts
    chain = [EscalationStep(tier="editor", window_s=4 * 3600)]
    return WorkflowHarness(SPEC, Deps(model(), sources, delivery, chain, "auto_reject"))


async def test_sources_are_gathered_each_checkpointed_then_a_draft_goes_to_an_editor(
    agent: WorkflowHarness, parts: tuple[FakeSources, FakeDelivery]
) -> None:
    step = await agent.deliver(requested(), "wf-1")
    assert parts[0].calls == ["alpha", "gamma"]
    assert [len(c.gathered) for c in step.checkpoints] == [1, 2]  # type: ignore[attr-defined]
    drafted = step.first(ReportDrafted)
    assert "量子計算の現状" in drafted.title and drafted.citations == ["alpha", "gamma"]
    assert step.first(ApprovalRequested).chain[0].tier == "editor"


async def test_a_source_that_refuses_stops_the_step_after_the_ones_gathered(
    agent: WorkflowHarness, parts: tuple[FakeSources, FakeDelivery]
) -> None:
    parts[0].failing = frozenset({"gamma"})
    with pytest.raises(ExternalRejection):
        await agent.deliver(requested(), "wf-2")
    assert [g.name for g in agent.state("wf-2").gathered] == ["alpha"]  # kept for the retry
    parts[0].failing = frozenset()
    await agent.deliver(requested(), "wf-2", attempt=2)
    assert parts[0].calls == ["alpha", "gamma", "gamma"]  # alpha is not asked again


async def test_an_approved_report_is_delivered_and_the_workflow_completes(
    agent: WorkflowHarness, parts: tuple[FakeSources, FakeDelivery]
) -> None:
    await agent.deliver(requested(), "wf-3")
    step = await agent.deliver(decided("approve"), "wf-3")
    assert step.emitted_types() == ["report.delivered", "workflow.ended"]
    assert step.first(ReportDelivered).status_code == 201
    [(url, report, key)] = parts[1].delivered
    assert url == "https://reports.example.test/in" and report["citations"] == ["alpha", "gamma"]
    assert key.endswith(":delivery")
    assert step.first(WorkflowEnded).outcome == "completed"


async def test_a_revision_drafts_again_with_the_editors_words(agent: WorkflowHarness) -> None:
    await agent.deliver(requested(), "wf-4")
    step = await agent.deliver(decided("revise", "mehr Quellen, bitte"), "wf-4")
    drafted = step.first(ReportDrafted)
    assert drafted.revision == 2
    assert any("mehr Quellen, bitte" in section.body for section in drafted.sections)


async def test_a_rejected_report_ends_the_workflow_without_delivery(
    agent: WorkflowHarness, parts: tuple[FakeSources, FakeDelivery]
) -> None:
    await agent.deliver(requested(), "wf-5")
    step = await agent.deliver(decided("reject", "off topic"), "wf-5")
    assert step.first(WorkflowEnded).outcome == "rejected"
    assert parts[1].delivered == []
