"""The budget agent on real Kafka and PostgreSQL: a validated invoice within its purchase
order reserves the amount on the PO's cost center once (even when delivered twice), says so
with budget.reserved and asks a person to approve the payment."""

from __future__ import annotations

import pytest

from chorus.base.db import create_pool
from chorus.contracts.procurement import BudgetReserved, InvoiceValidated
from chorus.reference.budget_agent.adapters.ledger import Ledger
from chorus.reference.budget_agent.config import Settings
from chorus.reference.budget_agent.domain import PurchaseOrder
from chorus.reference.budget_agent.service import SPEC
from chorus.runtime.runner import running
from tests.support.examples import example
from tests.support.kafka import envelope
from tests.support.onkafka import OnKafka

pytestmark = pytest.mark.integration


async def test_a_validated_invoice_reserves_its_amount_once_and_asks_for_approval(on_kafka: OnKafka) -> None:
    # A cost center, purchase order and invoice of this test's own: the ledger is shared.
    unique = on_kafka.unique
    cost_center, number = f"cc-{unique}", f"INV-{unique}"
    order = PurchaseOrder(
        po_number=f"PO-{unique}",
        vendor_id="vendor-acme",
        currency="EUR",
        total_cents=150_000,
        cost_center=cost_center,
    )
    read = example(InvoiceValidated)
    extracted = read.extracted.model_copy(update={"po_number": order.po_number, "invoice_number": number})
    validated = read.model_copy(update={"invoice_id": number, "extracted": extracted})
    sent = envelope(validated, workflow_id=f"wf-budget-{unique}", workflow_type="procurement")
    settings = on_kafka.settings(Settings, SPEC.name, budgets={cost_center: 500_000}, purchase_orders=[order])
    async with running(SPEC, settings, registry=on_kafka.registry):
        await on_kafka.publish(sent, sent)  # the same event again: a redelivery
        [reserved] = await on_kafka.read("budget.reserved", sent.workflow_id, settle_s=2.0)
        [asked] = await on_kafka.read("approval.requested", sent.workflow_id)
    assert reserved.payload == BudgetReserved(
        invoice_id=number,
        reservation_id=f"res-{sent.workflow_id}-{number}",
        cost_center=cost_center,
        amount_cents=124_000,
        currency="EUR",
        po_number=order.po_number,
        vendor_id="vendor-acme",
    )
    request = asked.payload
    assert (request.approval_id, request.requested_by) == (f"appr-{sent.workflow_id}-1", "budget_agent")
    assert [step.tier for step in request.chain] == ["manager", "director"]
    assert request.facts.amount_cents == 124_000  # what the gate's policy routes on
    pool = await create_pool(on_kafka.database_url, max_size=1)
    try:
        assert await Ledger(pool).available(cost_center) == 500_000 - 124_000  # taken once
        on_record = await Ledger(pool).purchase_order(order.po_number)
        assert on_record is not None and on_record.remaining_cents == 150_000 - 124_000
    finally:
        await pool.close()
