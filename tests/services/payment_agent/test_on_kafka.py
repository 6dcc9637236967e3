"""The payment agent on real Kafka and PostgreSQL: an approved, reserved invoice is paid
through the provider (the sandbox's) once, under the step's idempotency key, even when the
approval is delivered twice."""

from __future__ import annotations

import pytest

from chorus.contracts.procurement import BudgetReserved, InvoiceValidated, PaymentIssued
from chorus.reference.payment_agent.config import Settings
from chorus.reference.payment_agent.service import SPEC
from chorus.runtime.runner import running
from tests.support.examples import example
from tests.support.kafka import approval, envelope
from tests.support.onkafka import OnKafka, Outside

pytestmark = pytest.mark.integration


async def test_an_approved_invoice_is_paid_once_even_when_the_approval_comes_twice(
    on_kafka: OnKafka, sandbox: Outside
) -> None:
    workflow_id = f"wf-pay-{on_kafka.unique}"
    validated = example(InvoiceValidated)
    reserved = BudgetReserved(
        invoice_id=validated.invoice_id,
        reservation_id=f"res-{workflow_id}",
        cost_center="cc-research",
        amount_cents=validated.extracted.total_cents,
        currency=validated.extracted.currency,
    )
    facts = [envelope(e, workflow_id=workflow_id, workflow_type="procurement") for e in (validated, reserved)]
    approved = approval(workflow_id)  # signed by the gate, as the agent requires
    settings = on_kafka.settings(Settings, SPEC.name, payment_api_url=sandbox.url)
    async with running(SPEC, settings, registry=on_kafka.registry):
        await on_kafka.publish(*facts, approved, approved)
        [issued] = await on_kafka.read("payment.issued", workflow_id, settle_s=2.0)
        [ended] = await on_kafka.read("workflow.ended", workflow_id)
    key = f"pay:{workflow_id}:{validated.invoice_id}"
    assert sandbox.world.payment_requests == {key: 1}  # one call to the provider, under the step's key
    paid = sandbox.world.payments[key]
    assert issued.payload == PaymentIssued(
        invoice_id=validated.invoice_id,
        payment_id=paid["payment_id"],
        provider_reference=paid["reference"],
        amount_cents=validated.extracted.total_cents,
        currency=validated.extracted.currency,
    )
    assert (ended.payload.outcome, ended.payload.result["payment_id"]) == ("completed", paid["payment_id"])
