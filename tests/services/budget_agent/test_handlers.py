"""The budget agent's decisions: reserve and ask, reject, release (saga compensation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chorus.contracts.approvals import ApprovalRequested, EscalationStep
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.procurement import (
    BudgetRejected,
    BudgetReserved,
    InvoiceRejected,
    InvoiceValidated,
    PaymentFailed,
    budget_approval_id,
)
from chorus.reference.budget_agent.adapters.ledger import Release, Reserve
from chorus.reference.budget_agent.bootstrap import Deps
from chorus.reference.budget_agent.domain import PurchaseOrder
from chorus.reference.budget_agent.service import SPEC
from chorus.testing import WorkflowHarness
from tests.support.events import approval_decided
from tests.support.fakes import FixedBudgets

EXAMPLE = Path(__file__).resolve().parents[3] / "schemas/examples/invoice.validated/3/example-1.json"
CHAIN = [EscalationStep(tier="manager", window_s=8 * 3600), EscalationStep(tier="director", window_s=3600)]
PO = PurchaseOrder(
    po_number="PO-7781",
    vendor_id="vendor-acme",
    currency="EUR",
    total_cents=1_000_000,
    cost_center="cc-research",
)


def validated(
    total_cents: int = 124_000,
    *,
    vendor: str = "vendor-acme",
    po: str = "PO-7781",
    number: str = "INV-2026-0042",
) -> InvoiceValidated:
    body = json.loads(EXAMPLE.read_text())["payload"]
    body["extracted"].update(total_cents=total_cents, vendor_id=vendor, po_number=po, invoice_number=number)
    return InvoiceValidated.model_validate(body)


def budget_agent(holders: dict[tuple[str, str], str] | None = None) -> WorkflowHarness:
    ledger = FixedBudgets({"cc-research": 500_000}, [PO], holders)
    return WorkflowHarness(SPEC, Deps(ledger, CHAIN, "auto_reject"))


@pytest.fixture
def agent() -> WorkflowHarness:
    return budget_agent()


async def test_an_affordable_invoice_reserves_the_amount_and_asks_the_chain(agent: WorkflowHarness) -> None:
    step = await agent.deliver(validated(), "wf-1", subject_ref="subj-1")
    reserved = step.first(BudgetReserved)
    assert (reserved.amount_cents, reserved.cost_center) == (124_000, "cc-research")
    request = step.first(ApprovalRequested)
    assert [s.tier for s in request.chain] == ["manager", "director"]
    assert request.requested_by == "budget_agent"
    # Whom to pay is the order's vendor of record, stated in the signed reservation.
    assert (reserved.po_number, reserved.vendor_id) == ("PO-7781", "vendor-acme")
    [effect] = step.outcome.effects
    assert isinstance(effect, Reserve) and effect.amount_cents == 124_000
    assert effect.invoice == ("vendor-acme", "inv-2026-0042")  # claimed with the reservation
    assert effect.po_number == "PO-7781"  # and taken from what remains on the order


@pytest.mark.parametrize(
    ("invoice", "code", "detail"),
    [
        (validated(po="PO-0000"), "unknown_po", "no purchase order PO-0000 on record"),
        (validated(vendor="vendor-evil"), "vendor_mismatch", "PO-7781 is for vendor-acme, not vendor-evil"),
        (validated(total_cents=1_000_001), "over_po", "the invoice totals 1000001, PO-7781 allows 1000000"),
    ],
)
async def test_an_invoice_that_its_purchase_order_on_record_does_not_cover_is_rejected(
    agent: WorkflowHarness, invoice: InvoiceValidated, code: str, detail: str
) -> None:
    step = await agent.deliver(invoice, "wf-po")
    rejected = step.first(InvoiceRejected)
    assert (rejected.code, rejected.reasons) == (code, [detail])
    assert step.first(WorkflowEnded).reason == f"{code}: {detail}"
    assert step.outcome.ended == "rejected" and not step.outcome.effects  # nothing reserved


async def test_an_invoice_over_what_remains_on_its_purchase_order_is_rejected() -> None:
    invoiced = PO.model_copy(update={"invoiced_cents": 900_000})  # other invoices hold 9,000 EUR
    agent = WorkflowHarness(
        SPEC, Deps(FixedBudgets({"cc-research": 500_000}, [invoiced]), CHAIN, "auto_reject")
    )
    step = await agent.deliver(validated(total_cents=124_000), "wf-left")
    rejected = step.first(InvoiceRejected)
    assert rejected.code == "over_po"
    assert rejected.reasons == [
        "the invoice totals 124000, PO-7781 has 100000 of 1000000 left (the rest is invoiced already)"
    ]
    assert not step.outcome.effects
    fits = await agent.deliver(validated(total_cents=100_000), "wf-fits")
    assert fits.first(BudgetReserved).amount_cents == 100_000


async def test_an_invoice_another_workflow_holds_is_a_duplicate_whatever_its_case_or_hidden_characters() -> (
    None
):
    agent = budget_agent(holders={("vendor-acme", "inv-2026-0042"): "wf-first"})
    step = await agent.deliver(validated(number="inv-2026\u200b-0042"), "wf-second")
    rejected = step.first(InvoiceRejected)
    assert rejected.code == "duplicate_invoice"
    assert "wf-first" not in rejected.reasons[0]  # another submitter's workflow is not named
    assert step.emitted_types() == ["invoice.rejected", "workflow.ended"]
    assert not step.outcome.effects


async def test_a_revised_reading_with_another_amount_gives_the_reservation_back_and_ends(
    agent: WorkflowHarness,
) -> None:
    await agent.deliver(validated(), "wf-rev")
    same = await agent.deliver(validated(), "wf-rev")
    assert same.emitted_types() == ["approval.requested"]  # asked again, on the same reservation
    changed = await agent.deliver(validated(total_cents=130_000), "wf-rev")
    assert changed.emitted_types() == ["budget.released", "workflow.ended"]
    assert "changed the amount" in changed.first(WorkflowEnded).reason
    [release] = changed.outcome.effects
    assert isinstance(release, Release) and not release.keep_invoice


async def test_an_invoice_over_the_budget_is_rejected_and_ends_the_workflow(agent: WorkflowHarness) -> None:
    step = await agent.deliver(validated(total_cents=900_000), "wf-2")
    rejected = step.first(BudgetRejected)
    assert (rejected.requested_cents, rejected.available_cents) == (900_000, 500_000)
    assert step.first(WorkflowEnded).outcome == "rejected"
    assert not step.outcome.effects


async def test_a_failed_payment_releases_the_reservation_once_and_ends_compensated(
    agent: WorkflowHarness,
) -> None:
    await agent.deliver(validated(), "wf-3", subject_ref="subj-3")
    failed = PaymentFailed(
        invoice_id="INV-2026-0042", reason="vendor closed", category="rejected_by_provider"
    )
    step = await agent.deliver(failed, "wf-3")
    # No claim that anyone was told: the notifier tells the submitter of the end, and
    # states submitter.notified once their channel took the message.
    assert step.emitted_types() == ["budget.released", "workflow.ended"]
    assert step.first(WorkflowEnded).outcome == "compensated"
    [release] = step.outcome.effects
    assert isinstance(release, Release) and not release.keep_invoice  # may be submitted again
    again = await agent.deliver(failed, "wf-3")
    assert again.emitted == [] and not again.outcome.effects  # released already


async def test_a_payment_given_up_on_keeps_the_invoice_claimed(agent: WorkflowHarness) -> None:
    await agent.deliver(validated(), "wf-6")
    failed = PaymentFailed(invoice_id="INV-2026-0042", reason="timeouts", category="exhausted_retries")
    step = await agent.deliver(failed, "wf-6")
    [release] = step.outcome.effects
    assert isinstance(release, Release) and release.keep_invoice  # the provider may have paid


async def test_a_rejected_approval_releases_the_budget(agent: WorkflowHarness) -> None:
    await agent.deliver(validated(), "wf-4")
    decided = approval_decided(
        "reject",
        approval_id=budget_approval_id("wf-4", 1),
        decided_by="chorus:fallback",
        tier="director",
        automatic=True,
    )
    step = await agent.deliver(decided, "wf-4")
    assert step.emitted_types() == ["budget.released", "workflow.ended"]
    assert "the fallback policy" in step.first(WorkflowEnded).reason


async def test_a_workflow_that_timed_out_gives_its_budget_back(agent: WorkflowHarness) -> None:
    await agent.deliver(validated(), "wf-5")
    ended = WorkflowEnded(outcome="timed_out", reason="deadline", ended_by="gateway")
    step = await agent.deliver(ended, "wf-5")
    assert step.emitted_types() == ["budget.released"]


async def test_a_workflow_cancelled_after_its_approval_keeps_the_invoice_claimed(
    agent: WorkflowHarness,
) -> None:
    """Once approved, the payment may have reached the provider when the end cut its retry
    short: the budget comes back, the invoice stays claimed until a person checks."""
    await agent.deliver(validated(), "wf-7")
    approved = approval_decided(approval_id=budget_approval_id("wf-7", 1), decided_by="dana")
    await agent.deliver(approved, "wf-7")
    ended = WorkflowEnded(outcome="cancelled", reason="cancelled by sam", ended_by="gateway")
    step = await agent.deliver(ended, "wf-7")
    assert step.emitted_types() == ["budget.released"]
    [release] = step.outcome.effects
    assert isinstance(release, Release) and release.keep_invoice
