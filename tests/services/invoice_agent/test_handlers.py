"""The invoice agent's decisions, handler by handler, in memory (chorus.testing)."""

from __future__ import annotations

import pytest

from chorus.base.errors import SemanticError
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.procurement import (
    InvoiceCorrectionRequested,
    InvoiceLine,
    InvoiceLineAdded,
    InvoiceLineChecked,
    InvoiceReceived,
    InvoiceRejected,
    InvoiceValidated,
)
from chorus.reference.invoice_agent.bootstrap import Deps
from chorus.reference.invoice_agent.domain import state_v1_to_v2
from chorus.reference.invoice_agent.service import SPEC
from chorus.testing import WorkflowHarness
from tests.support.events import approval_decided
from tests.support.fakes import model


def received(
    total: str = "1240.00",
    lines: str = "40 x GPU-Stunden @ 31.00 EUR",
    *,
    vendor_on_invoice: str = "vendor-acme",
    claimed_cents: int = 124_000,
) -> InvoiceReceived:
    text = f"INVOICE INV-1\nVendor: {vendor_on_invoice}\nPO: PO-7781\n{lines}\nTotal: {total} EUR"
    return InvoiceReceived(
        invoice_id="INV-1",
        vendor_id="vendor-acme",
        po_number="PO-7781",
        currency="EUR",
        total_cents=claimed_cents,
        document_text=text,
        requester_ref="subj-1",
    )


@pytest.fixture
def agent() -> WorkflowHarness:
    return WorkflowHarness(SPEC, Deps(llm=model()))


async def test_an_invoice_that_reads_as_claimed_is_validated(agent: WorkflowHarness) -> None:
    step = await agent.deliver(received(), "wf-1")
    validated = step.first(InvoiceValidated)
    assert validated.extracted.total_cents == 124_000
    assert [line.description for line in validated.extracted.lines] == ["GPU-Stunden"]
    assert "total matches the claim" in [c.check for c in validated.checks]
    assert validated.reading is not None and validated.reading.attempts == 1
    assert agent.state("wf-1").validated


async def test_an_invoice_for_more_than_the_request_claims_is_rejected(agent: WorkflowHarness) -> None:
    step = await agent.deliver(received(claimed_cents=100_000), "wf-7")
    [reason] = step.first(InvoiceRejected).reasons
    assert reason == "the invoice totals 124000, the request says 100000"
    assert step.outcome.ended == "rejected"


async def test_a_look_alike_vendor_on_the_invoice_is_rejected_and_shown_escaped(
    agent: WorkflowHarness,
) -> None:
    step = await agent.deliver(received(vendor_on_invoice="vendor\u200b-acme"), "wf-8")
    [reason] = step.first(InvoiceRejected).reasons
    assert reason == "the invoice is from 'vendor\\u200b-acme', the request says vendor-acme"


async def test_lines_that_do_not_add_up_reject_the_invoice_and_end_the_workflow(
    agent: WorkflowHarness,
) -> None:
    step = await agent.deliver(received(total="999.00"), "wf-2")
    assert step.emitted_types() == ["invoice.rejected", "workflow.ended"]
    assert any("lines add up to 124000" in reason for reason in step.first(InvoiceRejected).reasons)
    assert step.first(WorkflowEnded).outcome == "rejected"
    assert step.outcome.ended == "rejected"


def add_line(quantity: int, cents: int, signal: str = "1") -> InvoiceLineAdded:
    return InvoiceLineAdded(
        signal_id=f"sig-{signal * 32}"[:36],
        sent_by="alice",
        reason="the scan cut the last line off",
        line=InvoiceLine(description="GPU-Stunden", quantity=quantity, unit_price_cents=cents),
    )


async def test_lines_short_of_the_total_wait_for_the_submitter_to_add_the_missing_one(
    agent: WorkflowHarness,
) -> None:
    step = await agent.deliver(received(lines="30 x GPU-Stunden @ 31.00 EUR"), "wf-9")
    assert step.emitted_types() == ["invoice.correction_requested"]
    assert step.first(InvoiceCorrectionRequested).missing_cents == 31_000
    assert step.outcome.ended is None and agent.state("wf-9").awaiting_line is not None

    wrong = await agent.deliver(add_line(5, 3100), "wf-9")
    [answer] = wrong.emitted
    assert isinstance(answer, InvoiceLineChecked) and not answer.accepted
    assert answer.signal_id == "sig-" + "1" * 32 and answer.lines_cents == 108_500
    assert "not taken" in answer.detail and agent.state("wf-9").awaiting_line is not None

    # Worth more than the lines fall short by (a quantity no invoice has): refused, no overflow.
    huge = await agent.deliver(add_line(10**9, 2**53 - 1, signal="4"), "wf-9")
    assert not huge.first(InvoiceLineChecked).accepted and "fall short of the total by 31000" in (
        huge.first(InvoiceLineChecked).detail
    )

    right = await agent.deliver(add_line(10, 3100, signal="2"), "wf-9")
    assert right.emitted_types() == ["invoice.line_checked", "invoice.validated"]
    assert right.first(InvoiceLineChecked).accepted
    validated = right.first(InvoiceValidated)
    assert [line.quantity for line in validated.extracted.lines] == [30, 10]
    assert "a line the reading missed, added by the submitter" in [c.check for c in validated.checks]
    assert validated.reading is not None and validated.reading.attempts == 1  # the model's reading, kept
    assert agent.state("wf-9").validated and agent.state("wf-9").awaiting_line is None

    late = await agent.deliver(add_line(1, 1, signal="3"), "wf-9")
    [answer] = late.emitted
    assert isinstance(answer, InvoiceLineChecked) and not answer.accepted
    assert answer.detail == "the invoice was validated already"


async def test_a_line_for_an_invoice_that_reads_cleanly_is_refused_and_changes_nothing(
    agent: WorkflowHarness,
) -> None:
    await agent.deliver(received(), "wf-10")
    step = await agent.deliver(add_line(1, 100), "wf-10")
    assert step.emitted_types() == ["invoice.line_checked"]
    assert not step.first(InvoiceLineChecked).accepted


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
    revise = approval_decided("revise", comment="check the hours")
    step = await agent.deliver(revise, "wf-5", workflow_type="procurement")
    assert step.emitted_types() == ["invoice.validated"]
    assert agent.state("wf-5").readings == 2


async def test_a_reviewer_vouching_for_an_unreadable_invoice_validates_the_claimed_amount(
    agent: WorkflowHarness,
) -> None:
    # The claim, not a purchase order: the request carries none, and the PO's total is
    # not what the invoice asks for.
    unreadable = received(lines="UNREADABLE scan", claimed_cents=99_500)
    with pytest.raises(SemanticError):  # after its last try the runtime asks a person
        await agent.deliver(unreadable, "wf-6")
    approve = approval_decided(
        approval_id="review-1", decided_by="erin.director", tier="operator", requested_by="invoice_agent"
    )
    step = await agent.deliver(approve, "wf-6", workflow_type="procurement")
    validated = step.first(InvoiceValidated)
    assert (validated.extracted.total_cents, validated.extracted.po_number) == (99_500, "PO-7781")
    # Who vouched is personal data: it stays in the (sealed) approval, not in the checks.
    checks = [c.check for c in validated.checks]
    assert "reading confirmed by the reviewer who approved it" in checks
    assert not any("erin.director" in check for check in checks)
    assert validated.reading is None  # nobody read it: a reviewer vouched for the claim


def test_a_checkpoint_of_a_v1_start_event_is_read_as_v2() -> None:
    v1 = {
        "invoice_id": "INV-1",
        "vendor_id": "vendor-acme",
        "document_text": "INVOICE INV-1",
        "purchase_order": {
            "po_number": "PO-7781",
            "vendor_id": "vendor-acme",
            "currency": "EUR",
            "total_cents": 150_000,
            "cost_center": "cc-research",
        },
        "requester_ref": "subj-1",
    }
    state = SPEC.state.model_validate(state_v1_to_v2({"invoice": v1, "readings": 1}))  # type: ignore[union-attr]
    assert (state.invoice.po_number, state.invoice.total_cents) == ("PO-7781", 150_000)
