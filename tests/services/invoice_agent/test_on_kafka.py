"""The invoice agent on real Kafka and PostgreSQL: a received invoice is read by the language
model (the sandbox's, over its OpenAI-compatible API) once, even when delivered twice, and
validated against the submitter's claim."""

from __future__ import annotations

import pytest

from chorus.contracts.procurement import ExtractedInvoice, InvoiceLine, InvoiceReceived, Reading
from chorus.reference.invoice_agent.config import Settings
from chorus.reference.invoice_agent.service import SPEC
from chorus.runtime.runner import running
from tests.support.examples import example
from tests.support.kafka import envelope
from tests.support.onkafka import OnKafka, Outside

pytestmark = pytest.mark.integration


async def test_a_received_invoice_is_read_once_and_validated(on_kafka: OnKafka, sandbox: Outside) -> None:
    received = example(InvoiceReceived)  # "40 x GPU hours @ 31.00 EUR", 1240.00 EUR in all
    sent = envelope(received, workflow_id=f"wf-invoice-{on_kafka.unique}", workflow_type="procurement")
    settings = on_kafka.settings(Settings, SPEC.name, llm_base_url=f"{sandbox.url}/v1")
    async with running(SPEC, settings, registry=on_kafka.registry):
        await on_kafka.publish(sent, sent)  # the same event again: a redelivery
        [validated] = await on_kafka.read("invoice.validated", sent.workflow_id, settle_s=2.0)
    assert sandbox.world.llm_calls == {"extract_invoice": 1}
    assert validated.payload.invoice_id == received.invoice_id
    assert validated.payload.extracted == ExtractedInvoice(
        invoice_number=received.invoice_id,
        vendor_id=received.vendor_id,
        po_number=received.po_number,
        currency="EUR",
        total_cents=124_000,
        lines=[InvoiceLine(description="GPU hours", quantity=40, unit_price_cents=3100)],
    )
    checks = validated.payload.checks
    assert all(c.passed for c in checks) and "lines add up to the total" in [c.check for c in checks]
    assert validated.payload.reading == Reading(model=settings.llm_model, attempts=1)
