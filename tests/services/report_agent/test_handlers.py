"""The report agent fans its sources out, drafts from what arrived, asks an editor, delivers."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chorus.base.errors import TransientError
from chorus.base.tracing import handling_span
from chorus.contracts.approvals import ApprovalDecided, ApprovalRequested, Decision, EscalationStep
from chorus.contracts.lifecycle import StageDeadlineReached, WorkflowEnded
from chorus.contracts.research import (
    GatheredSource,
    ReportDelivered,
    ReportDrafted,
    ReportRequested,
    SourceFetched,
    SourceFetchFailed,
    SourceFetchRequested,
    SourceRef,
)
from chorus.kernel.service import CancelTimer, ScheduleTimer
from chorus.reference.report_agent.bootstrap import Deps
from chorus.reference.report_agent.service import SPEC
from chorus.testing import WorkflowHarness
from tests.support.events import approval_decided
from tests.support.fakes import FakeDelivery, model

EXCERPTS = {"alpha": "Qubits sind fragil.", "gamma": "誤り訂正が鍵です。", "delta": "Fehler sind häufig."}


def requested(
    delivery_url: str | None = "https://reports.example.test/in", **extra: object
) -> ReportRequested:
    return ReportRequested(
        topic="量子計算の現状",
        sources=[SourceRef(name=n, url=f"https://sources.example.test/{n}") for n in EXCERPTS],
        min_words=20,
        delivery_url=delivery_url,
        sources_within_s=60,
        **extra,  # type: ignore[arg-type]
    )


def fetched(name: str) -> SourceFetched:
    return SourceFetched(
        stage_id="sources",
        task=name,
        source=GatheredSource(name=name, excerpt=EXCERPTS[name]),
        started_at=datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc),
    )


def deadline(harness: WorkflowHarness, service: str = "report_agent") -> StageDeadlineReached:
    return StageDeadlineReached(
        stage_id="sources", service=service, deadline_at=harness.clock.now() + timedelta(seconds=60)
    )


def decided(decision: Decision, comment: str = "") -> ApprovalDecided:
    return approval_decided(
        decision, comment=comment, decided_by="lee.editor", tier="editor", requested_by="report_agent"
    )


@pytest.fixture
def delivery() -> FakeDelivery:
    return FakeDelivery()


@pytest.fixture
def agent(delivery: FakeDelivery) -> WorkflowHarness:
    chain = [EscalationStep(tier="editor", window_s=4 * 3600)]
    return WorkflowHarness(SPEC, Deps(model(), delivery, chain, "auto_reject"))


async def gathered_all(agent: WorkflowHarness, workflow_id: str) -> None:
    await agent.deliver(requested(), workflow_id)
    for name in EXCERPTS:
        await agent.deliver(fetched(name), workflow_id)


async def test_a_request_fans_out_one_fetch_per_source_and_a_stage_deadline(agent: WorkflowHarness) -> None:
    step = await agent.deliver(requested(), "wf-1")
    asked = [e for e in step.emitted if isinstance(e, SourceFetchRequested)]
    assert [a.task for a in asked] == ["alpha", "gamma", "delta"]
    [timer] = step.outcome.timers
    assert isinstance(timer, ScheduleTimer) and timer.due_at == agent.clock.now() + timedelta(seconds=60)
    assert all(a.answer_by == timer.due_at for a in asked)
    assert (await agent.deliver(requested(), "wf-1")).emitted == []  # a redelivered request


async def test_the_last_source_in_closes_the_stage_and_a_draft_goes_to_an_editor(
    agent: WorkflowHarness,
) -> None:
    await agent.deliver(requested(), "wf-2")
    assert (await agent.deliver(fetched("delta"), "wf-2")).emitted == []
    assert (await agent.deliver(fetched("alpha"), "wf-2")).emitted == []
    step = await agent.deliver(fetched("gamma"), "wf-2")
    drafted = step.first(ReportDrafted)
    assert "量子計算の現状" in drafted.title and drafted.citations == ["alpha", "gamma", "delta"]
    assert drafted.sources_missing == []
    assert step.first(ApprovalRequested).chain[0].tier == "editor"
    assert CancelTimer("stage:sources", "stage complete") in step.outcome.timers


async def test_at_the_deadline_the_draft_is_built_from_what_arrived_and_names_what_is_missing(
    agent: WorkflowHarness,
) -> None:
    await agent.deliver(requested(), "wf-3")
    await agent.deliver(fetched("alpha"), "wf-3")
    await agent.deliver(SourceFetchFailed(stage_id="sources", task="gamma", reason="404"), "wf-3")
    assert (await agent.deliver(deadline(agent, service="another_agent"), "wf-3")).emitted == []
    step = await agent.deliver(deadline(agent), "wf-3")
    drafted = step.first(ReportDrafted)
    assert drafted.citations == ["alpha"] and drafted.sources_missing == ["gamma", "delta"]
    context = step.first(ApprovalRequested).context
    assert "missing: gamma, delta" in context.summary
    assert "missing gamma: 404" in context.steps_taken
    late = await agent.deliver(fetched("delta"), "wf-3")
    assert late.emitted == [] and agent.state("wf-3").sources.late == ["delta"]


async def test_with_policy_fail_a_missing_source_at_the_deadline_fails_the_workflow(
    agent: WorkflowHarness,
) -> None:
    await agent.deliver(requested(sources_policy="fail"), "wf-4")
    await agent.deliver(fetched("alpha"), "wf-4")
    step = await agent.deliver(deadline(agent), "wf-4")
    ended = step.first(WorkflowEnded)
    assert ended.outcome == "failed" and step.outcome.ended == "failed"
    assert ended.result == {"sources_missing": ["gamma", "delta"]}
    assert "report.drafted" not in step.emitted_types()


async def test_an_approved_report_is_delivered_and_the_workflow_completes(
    agent: WorkflowHarness, delivery: FakeDelivery
) -> None:
    await gathered_all(agent, "wf-5")
    step = await agent.deliver(decided("approve"), "wf-5")
    assert step.emitted_types() == ["report.delivered", "workflow.ended"]
    assert step.first(ReportDelivered).status_code == 201
    [(url, report, key)] = delivery.delivered
    assert url == "https://reports.example.test/in" and report["citations"] == ["alpha", "gamma", "delta"]
    assert key.endswith(":delivery")
    assert step.first(WorkflowEnded).outcome == "completed"


async def test_a_revision_drafts_again_with_the_editors_words(agent: WorkflowHarness) -> None:
    await gathered_all(agent, "wf-6")
    step = await agent.deliver(decided("revise", "mehr Quellen, bitte"), "wf-6")
    drafted = step.first(ReportDrafted)
    assert drafted.revision == 2
    assert any("mehr Quellen, bitte" in section.body for section in drafted.sections)


async def test_a_rejected_report_ends_the_workflow_without_delivery(
    agent: WorkflowHarness, delivery: FakeDelivery
) -> None:
    await gathered_all(agent, "wf-7")
    step = await agent.deliver(decided("reject", "off topic"), "wf-7")
    assert step.first(WorkflowEnded).outcome == "rejected"
    assert delivery.delivered == []


class FailingOnce:
    """The model, down for its first call (a transient failure: the runtime retries)."""

    def __init__(self) -> None:
        self.model = model()
        self.failed = False

    async def complete(self, messages: list[Any], *, timeout_s: float = 120.0) -> str:
        if not self.failed:
            self.failed = True
            raise TransientError("model unavailable")
        return await self.model.complete(messages, timeout_s=timeout_s)


async def test_the_closed_stage_is_kept_before_drafting_and_a_retry_of_the_closing_event_drafts(
    delivery: FakeDelivery,
) -> None:
    chain = [EscalationStep(tier="editor", window_s=4 * 3600)]
    agent = WorkflowHarness(SPEC, Deps(FailingOnce(), delivery, chain, "auto_reject"))  # type: ignore[arg-type]
    await agent.deliver(requested(), "wf-8")
    await agent.deliver(fetched("alpha"), "wf-8")
    closing = agent.event(deadline(agent), "wf-8")
    with pytest.raises(TransientError):
        await agent.deliver(closing)
    kept = agent.state("wf-8")
    assert not kept.sources.is_open and [g.name for g in kept.gathered] == ["alpha"]
    assert (await agent.deliver(fetched("gamma"), "wf-8")).emitted == []  # late: no second draft
    retried = await agent.deliver(closing, attempt=2)
    assert retried.first(ReportDrafted).sources_missing == ["gamma", "delta"]


async def test_the_span_that_closes_the_sources_stage_links_to_every_report_of_it(
    agent: WorkflowHarness, exported: InMemorySpanExporter
) -> None:
    """A fan-in has many causes; a trace shows them all (OpenTelemetry's span links)."""
    await agent.deliver(requested(), "wf-links")
    reports = {name: f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01" for name in EXCERPTS}
    for name in ("alpha", "delta"):
        await agent.deliver(fetched(name), "wf-links", traceparent=reports[name])
    with handling_span("process research.sources", reports["gamma"], {}):
        step = await agent.deliver(fetched("gamma"), "wf-links", traceparent=reports["gamma"])
    assert step.first(ReportDrafted)
    (span,) = exported.get_finished_spans()
    linked = {f"00-{link.context.trace_id:032x}-{link.context.span_id:016x}-01" for link in span.links}
    assert linked == set(reports.values())
