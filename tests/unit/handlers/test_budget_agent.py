"""The budget agent's decisions: reserve and ask, reject, release (saga compensation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budget_agent.adapters.ledger import Release, Reserve
from budget_agent.bootstrap import Deps
from budget_agent.service import SPEC
from chorus.testing import WorkflowHarness
from chorus_contracts.approvals import ApprovalDecided, ApprovalRequested, EscalationStep
from chorus_contracts.lifecycle import WorkflowEnded
from chorus_contracts.procurement import BudgetRejected, BudgetReserved, InvoiceValidated, PaymentFailed
from tests.support.fakes import FixedBudgets

EXAMPLE = Path(__file__).resolve().parents[3] / "schemas/examples/invoice.validated/1/example-1.json"
CHAIN = [EscalationStep(tier="manager", window_s=8 * 3600), EscalationStep(tier="director", window_s=3600)]


def validated(total_cents: int = 124_000) -> InvoiceValidated:
    body = json.loads(EXAMPLE.read_text())["payload"]
    body["extracted"]["total_cents"] = total_cents
    return InvoiceValidated.model_validate(body)


@pytest.fixture
def agent() -> WorkflowHarness:
    return WorkflowHarness(SPEC, Deps(FixedBudgets({"cc-research": 500_000}), CHAIN, "auto_reject"))


async def test_an_affordable_invoice_reserves_the_amount_and_asks_the_chain(agent: WorkflowHarness) -> None:
    step = await agent.deliver(validated(), "wf-1", subject_ref="subj-1")
    reserved = step.first(BudgetReserved)
    assert (reserved.amount_cents, reserved.cost_center) == (124_000, "cc-research")
    request = step.first(ApprovalRequested)
    assert [s.tier for s in request.chain] == ["manager", "director"]
    assert request.requested_by == "budget_agent"
    [effect] = step.outcome.effects
    assert isinstance(effect, Reserve) and effect.amount_cents == 124_000


async def test_an_invoice_over_the_budget_is_rejected_and_ends_the_workflow(agent: WorkflowHarness) -> None:
    step = await agent.deliver(validated(total_cents=900_000), "wf-2")
    rejected = step.first(BudgetRejected)
    assert (rejected.requested_cents, rejected.available_cents) == (900_000, 500_000)
    assert step.first(WorkflowEnded).outcome == "rejected"
    assert not step.outcome.effects


async def test_a_failed_payment_releases_the_reservation_once_and_tells_the_requester(
    agent: WorkflowHarness,
) -> None:
    await agent.deliver(validated(), "wf-3", subject_ref="subj-3")
    failed = PaymentFailed(
        invoice_id="INV-2026-0042", reason="vendor closed", category="rejected_by_provider"
    )
    step = await agent.deliver(failed, "wf-3")
    assert step.emitted_types() == ["budget.released", "requester.notified", "workflow.ended"]
    assert step.first(WorkflowEnded).outcome == "compensated"
    assert isinstance(step.outcome.effects[0], Release)
    again = await agent.deliver(failed, "wf-3")
    assert again.emitted == [] and not again.outcome.effects  # released already


async def test_a_rejected_approval_releases_the_budget(agent: WorkflowHarness) -> None:
    await agent.deliver(validated(), "wf-4")
    decided = ApprovalDecided(
        approval_id="appr-4",
        decision="reject",
        decided_by="chorus:fallback",
        tier="director",
        automatic=True,
        requested_by="budget_agent",
    )
    step = await agent.deliver(decided, "wf-4")
    assert step.emitted_types() == ["budget.released", "workflow.ended"]
    assert "the fallback policy" in step.first(WorkflowEnded).reason


async def test_a_workflow_that_timed_out_gives_its_budget_back(agent: WorkflowHarness) -> None:
    await agent.deliver(validated(), "wf-5")
    ended = WorkflowEnded(outcome="timed_out", reason="deadline", ended_by="gateway")
    step = await agent.deliver(ended, "wf-5")
    assert step.emitted_types() == ["budget.released"]
