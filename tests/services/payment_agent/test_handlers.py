"""The payment agent pays once, when both the approval and the reservation are known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chorus.base.errors import TransientError
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.procurement import (
    BudgetReserved,
    InvoiceValidated,
    PaymentFailed,
    PaymentIssued,
    budget_approval_id,
)
from chorus.reference.payment_agent.bootstrap import Deps
from chorus.reference.payment_agent.service import SPEC
from chorus.testing import WorkflowHarness
from tests.support.events import approval_decided
from tests.support.fakes import RecordingPayments

EXAMPLE = Path(__file__).resolve().parents[3] / "schemas/examples/invoice.validated/3/example-1.json"
VALIDATED = InvoiceValidated.model_validate(json.loads(EXAMPLE.read_text())["payload"])
RESERVED = BudgetReserved(
    invoice_id="INV-2026-0042",
    reservation_id="res-1",
    cost_center="cc-research",
    amount_cents=124_000,
    currency="EUR",
)


def approved(workflow_id: str) -> ApprovalDecided:
    """The manager's approval of the budget agent's request for ``workflow_id``."""
    return approval_decided(approval_id=budget_approval_id(workflow_id, 1))


APPROVED = approved("wf-1")


def harness(payments: RecordingPayments, max_attempts: int = 6) -> WorkflowHarness:
    return WorkflowHarness(SPEC, Deps(payments, max_attempts=max_attempts))


@pytest.mark.parametrize("order", [(VALIDATED, RESERVED, APPROVED), (APPROVED, RESERVED, VALIDATED)])
async def test_it_pays_once_whichever_fact_arrives_last(order: tuple[object, ...]) -> None:
    payments = RecordingPayments()
    agent = harness(payments)
    steps = [await agent.deliver(event, "wf-1") for event in order]  # type: ignore[arg-type]
    assert [s.emitted_types() for s in steps[:2]] == [[], []]
    assert steps[2].emitted_types() == ["payment.issued", "workflow.ended"]
    assert steps[2].first(PaymentIssued).amount_cents == 124_000
    assert steps[2].first(WorkflowEnded).result["payment_id"] == "pay-1"
    again = await agent.deliver(approved("wf-1"), "wf-1")
    assert again.emitted == [] and len(payments.calls) == 1


async def test_the_provider_refusing_is_a_payment_failure_for_the_saga() -> None:
    agent = harness(RecordingPayments(refuse=frozenset({"vendor-acme"})))
    for event in (VALIDATED, RESERVED):
        await agent.deliver(event, "wf-2")
    step = await agent.deliver(approved("wf-2"), "wf-2")
    assert step.first(PaymentFailed).category == "rejected_by_provider"


async def test_an_outage_is_retried_and_the_last_attempt_gives_up_cleanly() -> None:
    payments = RecordingPayments(outage=10)
    agent = harness(payments, max_attempts=3)
    for event in (VALIDATED, RESERVED):
        await agent.deliver(event, "wf-3")
    with pytest.raises(TransientError):
        await agent.deliver(approved("wf-3"), "wf-3", attempt=2)
    step = await agent.deliver(approved("wf-3"), "wf-3", attempt=3)
    assert step.first(PaymentFailed).category == "exhausted_retries"
    assert len({call["key"] for call in payments.calls}) == 1  # one idempotency key throughout


async def test_a_reservation_that_is_not_the_validated_amount_is_not_paid() -> None:
    payments = RecordingPayments()
    agent = harness(payments)
    more = RESERVED.model_copy(update={"amount_cents": 150_000})  # e.g. a purchase order's total
    for event in (VALIDATED, more):
        await agent.deliver(event, "wf-4")
    step = await agent.deliver(approved("wf-4"), "wf-4")
    failed = step.first(PaymentFailed)
    assert failed.category == "persistent"
    assert failed.reason == "the reservation holds 150000 cents but the validated invoice totals 124000"
    assert payments.calls == []


async def test_it_pays_the_purchase_orders_vendor_of_record_not_the_models_reading() -> None:
    """The model read the vendor in a compatibility form (full-width letters): the budget
    agent matched it to its order, and the money goes to the vendor on record."""
    payments = RecordingPayments()
    agent = harness(payments)
    full_width = "\uff56\uff45\uff4e\uff44\uff4f\uff52-acme"
    extracted = VALIDATED.extracted.model_copy(update={"vendor_id": full_width})
    read = VALIDATED.model_copy(update={"extracted": extracted})
    on_record = RESERVED.model_copy(update={"po_number": "PO-7781", "vendor_id": "vendor-acme"})
    for event in (read, on_record):
        await agent.deliver(event, "wf-5")
    step = await agent.deliver(approved("wf-5"), "wf-5")
    assert step.emitted_types() == ["payment.issued", "workflow.ended"]
    assert [call["vendor_id"] for call in payments.calls] == ["vendor-acme"]


async def test_an_invoice_naming_another_vendor_than_its_orders_record_is_not_paid() -> None:
    payments = RecordingPayments()
    agent = harness(payments)
    extracted = VALIDATED.extracted.model_copy(update={"vendor_id": "vendor-acme-ltd"})
    read = VALIDATED.model_copy(update={"extracted": extracted})
    on_record = RESERVED.model_copy(update={"po_number": "PO-7781", "vendor_id": "vendor-acme"})
    for event in (read, on_record):
        await agent.deliver(event, "wf-6")
    step = await agent.deliver(approved("wf-6"), "wf-6")
    failed = step.first(PaymentFailed)
    assert failed.category == "persistent"
    assert (
        failed.reason
        == "the invoice names 'vendor-acme-ltd'; its purchase order's vendor of record is vendor-acme"
    )
    assert payments.calls == []


async def test_an_approval_of_anything_but_the_budget_agents_request_pays_nothing() -> None:
    """An approval in the budget agent's name for another approval of the workflow (a
    review anyone's runtime may ask for, approved in passing) is no payment approval."""
    payments = RecordingPayments()
    agent = harness(payments)
    for event in (VALIDATED, RESERVED):
        await agent.deliver(event, "wf-9")
    review = approval_decided(approval_id="review-wf-9-0b0c7f4e")
    assert list((await agent.deliver(review, "wf-9")).emitted) == [] and payments.calls == []
    assert (await agent.deliver(approved("wf-9"), "wf-9")).emitted_types()[0] == "payment.issued"
