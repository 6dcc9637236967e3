"""The invoice agent's decisions, handler by handler, in memory (chorus.testing)."""

from __future__ import annotations

import pytest

from chorus.errors import SemanticError
from chorus.testing import WorkflowHarness
from chorus_contracts.approvals import ApprovalDecided
from chorus_contracts.lifecycle import WorkflowEnded
from chorus_contracts.procurement import InvoiceReceived, InvoiceRejected, InvoiceValidated, PurchaseOrder
from invoice_agent.bootstrap import Deps
from invoice_agent.service import SPEC
from tests.support.fakes import model

PO = PurchaseOrder(
    po_number="PO-7781",
    vendor_id="vendor-acme",
    currency="EUR",
    total_cents=150_000,
    cost_center="cc-research",
)


def received(total: str = "1240.00", lines: str = "40 x GPU-Stunden @ 31.00 EUR") -> InvoiceReceived:
    text = f"INVOICE INV-1\nVendor: vendor-acme\nPO: PO-7781\n{lines}\nTotal: {total} EUR"
    return InvoiceReceived(
        invoice_id="INV-1",
        vendor_id="vendor-acme",
        document_text=text,
        purchase_order=PO,
        requester_ref="subj-1",
    )


@pytest.fixture
def agent() -> WorkflowHarness:
    return WorkflowHarness(SPEC, Deps(llm=model()))


async def test_an_invoice_that_matches_its_purchase_order_is_validated(agent: WorkflowHarness) -> None:
    step = await agent.deliver(received(), "wf-1")
    validated = step.first(InvoiceValidated)
    assert validated.extracted.total_cents == 124_000
    assert [line.description for line in validated.extracted.lines] == ["GPU-Stunden"]
    assert validated.cost_center == "cc-research"
    assert agent.state("wf-1").validated


async def test_lines_that_do_not_add_up_reject_the_invoice_and_end_the_workflow(
    agent: WorkflowHarness,
) -> None:
    step = await agent.deliver(received(total="999.00"), "wf-2")
    assert step.emitted_types() == ["invoice.rejected", "workflow.ended"]
    assert any("lines add up to 124000" in reason for reason in step.first(InvoiceRejected).reasons)
    assert step.first(WorkflowEnded).outcome == "rejected"
    assert step.outcome.ended == "rejected"


async def test_an_answer_without_a_total_is_a_semantic_error_to_re_prompt(agent: WorkflowHarness) -> None:
    with pytest.raises(SemanticError) as failure:
        await agent.deliver(received(lines="UNREADABLE scan"), "wf-3")
    assert any("total_cents" in error for error in failure.value.errors)


async def test_a_second_start_event_changes_nothing(agent: WorkflowHarness) -> None:
    await agent.deliver(received(), "wf-4")
    again = await agent.deliver(received(), "wf-4")
    assert again.emitted == [] and again.outcome.state is None


async def test_a_revision_asked_at_the_budget_approval_reads_the_invoice_again(
    agent: WorkflowHarness,
) -> None:
    await agent.deliver(received(), "wf-5")
    revise = ApprovalDecided(
        approval_id="appr-1",
        decision="revise",
        comment="check the hours",
        decided_by="dana.manager",
        tier="manager",
        requested_by="budget_agent",
    )
    step = await agent.deliver(revise, "wf-5", workflow_type="procurement")
    assert step.emitted_types() == ["invoice.validated"]
    assert agent.state("wf-5").readings == 2


async def test_a_reviewer_vouching_for_an_unreadable_invoice_validates_it_from_the_purchase_order(
    agent: WorkflowHarness,
) -> None:
    with pytest.raises(SemanticError):  # after its last try the runtime asks a person
        await agent.deliver(received(lines="UNREADABLE scan"), "wf-6")
    approve = ApprovalDecided(
        approval_id="review-1",
        decision="approve",
        decided_by="erin.director",
        tier="operator",
        requested_by="invoice_agent",
    )
    step = await agent.deliver(approve, "wf-6", workflow_type="procurement")
    validated = step.first(InvoiceValidated)
    assert validated.extracted.total_cents == PO.total_cents
    assert "reading confirmed by reviewer erin.director" in validated.checks
