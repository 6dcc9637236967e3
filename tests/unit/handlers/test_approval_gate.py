"""The approval gate: a window per tier, escalation, the fallback, who may decide."""

from __future__ import annotations

from datetime import timedelta

import pytest

from approval_gate.bootstrap import Deps
from approval_gate.service import SPEC
from chorus.service import CancelTimer, ScheduleTimer
from chorus.testing import WorkflowHarness
from chorus_contracts.approvals import (
    ApprovalContext,
    ApprovalDecided,
    ApprovalDecisionSubmitted,
    ApprovalEscalated,
    ApprovalRequested,
    ApprovalWindowElapsed,
    Decision,
    EscalationStep,
)
from chorus_contracts.platform import ReviewRequested

CHAIN = [EscalationStep(tier="manager", window_s=8 * 3600), EscalationStep(tier="director", window_s=3600)]
REQUEST = ApprovalRequested(
    approval_id="appr-1",
    requested_by="budget_agent",
    chain=CHAIN,
    fallback="auto_reject",
    context=ApprovalContext(summary="Invoice INV-1: 1240.00 EUR"),
)


@pytest.fixture
def gate() -> WorkflowHarness:
    return WorkflowHarness(SPEC, Deps([EscalationStep(tier="operator", window_s=86400)], "auto_reject"))


def submitted(tier: str, decision: Decision = "approve") -> ApprovalDecisionSubmitted:
    return ApprovalDecisionSubmitted(
        approval_id="appr-1", decision=decision, reviewer=f"someone.{tier}", reviewer_tier=tier
    )


async def test_a_request_opens_the_first_tiers_window_from_the_request_time(gate: WorkflowHarness) -> None:
    step = await gate.deliver(REQUEST, "wf-1")
    [timer] = step.outcome.timers
    assert isinstance(timer, ScheduleTimer)
    assert timer.due_at == step.event.envelope.occurred_at + timedelta(hours=8)
    assert timer.event == ApprovalWindowElapsed(approval_id="appr-1", level=0)


async def test_the_tier_that_waits_decides_and_its_window_is_cancelled(gate: WorkflowHarness) -> None:
    await gate.deliver(REQUEST, "wf-2")
    ignored = await gate.deliver(submitted("director"), "wf-2")  # not its turn yet
    assert ignored.emitted == []
    step = await gate.deliver(submitted("manager"), "wf-2")
    decided = step.first(ApprovalDecided)
    assert (decided.decision, decided.decided_by, decided.tier) == ("approve", "someone.manager", "manager")
    assert [type(t) for t in step.outcome.timers] == [CancelTimer]
    late = await gate.deliver(submitted("manager", "reject"), "wf-2")
    assert late.emitted == []  # a decision is final


async def test_an_unanswered_window_escalates_then_the_fallback_decides(gate: WorkflowHarness) -> None:
    await gate.deliver(REQUEST, "wf-3")
    gate.clock.advance(8 * 3600)
    step = await gate.deliver(ApprovalWindowElapsed(approval_id="appr-1", level=0), "wf-3")
    escalated = step.first(ApprovalEscalated)
    assert (escalated.from_tier, escalated.to_tier) == ("manager", "director")
    assert escalated.waiting_until == gate.clock.now() + timedelta(hours=1)
    stale = await gate.deliver(ApprovalWindowElapsed(approval_id="appr-1", level=0), "wf-3")
    assert stale.emitted == []  # that window was already acted on
    gate.clock.advance(3600)
    final = await gate.deliver(ApprovalWindowElapsed(approval_id="appr-1", level=1), "wf-3")
    decided = final.first(ApprovalDecided)
    assert (decided.decision, decided.automatic, decided.decided_by) == ("reject", True, "chorus:fallback")


async def test_output_no_handler_could_get_right_becomes_an_approval_for_a_person(
    gate: WorkflowHarness,
) -> None:
    review = ReviewRequested(
        service="invoice_agent",
        reason="invoice.received output failed validation 3 times",
        validation_errors=["/total_cents: Field required"],
        attempts=3,
        original_event_type="invoice.received",
        original_event_id="0f8b6c1e-aaaa-bbbb-cccc-000000000000",
    )
    step = await gate.deliver(review, "wf-4")
    request = step.first(ApprovalRequested)
    assert (request.requested_by, request.chain[0].tier) == ("invoice_agent", "operator")
    assert request.context.inputs["validation_errors"] == ["/total_cents: Field required"]
