"""Invoice decisions: the extraction prompt and the checks against the purchase order.

No I/O here; handlers call the LLM through the adapter and these functions decide.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from chorus.llm import ChatMessage, reprompt
from chorus_contracts.procurement import ExtractedInvoice, InvoiceLine, InvoiceReceived, PurchaseOrder

SERVICE = "invoice_agent"
"""The name this service publishes under (its ServiceSpec name, its consumer group)."""


TASK = "extract_invoice"
DOCUMENT_START = "<<<INVOICE"
DOCUMENT_END = "INVOICE>>>"


class InvoiceState(BaseModel):
    """The workflow as the invoice agent knows it."""

    invoice: InvoiceReceived
    readings: int = 0
    validated: bool = False


def extraction_prompt(document: str, feedback: list[str], reviewer_comment: str = "") -> list[ChatMessage]:
    schema = json.dumps(ExtractedInvoice.model_json_schema())
    system = (
        f"task: {TASK}\n"
        "You read supplier invoices. Answer with one JSON object matching this JSON Schema, "
        f"amounts in minor units (cents), nothing else:\n{schema}"
    )
    user = f"{DOCUMENT_START}\n{document}\n{DOCUMENT_END}"
    return reprompt(system, user, feedback, reviewer_comment)


def check_against_po(extracted: ExtractedInvoice, po: PurchaseOrder) -> tuple[list[str], list[str]]:
    """(checks passed, reasons to reject). An invoice is payable only with no reasons."""
    passed: list[str] = []
    reasons: list[str] = []

    def check(ok: bool, good: str, bad: str) -> None:
        (passed if ok else reasons).append(good if ok else bad)

    check(
        extracted.vendor_id == po.vendor_id,
        "vendor matches the PO",
        f"vendor {extracted.vendor_id} is not the PO's vendor {po.vendor_id}",
    )
    check(
        extracted.po_number == po.po_number,
        "PO number matches",
        f"invoice cites {extracted.po_number}, expected {po.po_number}",
    )
    check(
        extracted.currency == po.currency,
        "currency matches the PO",
        f"currency {extracted.currency} differs from the PO's {po.currency}",
    )
    line_sum = sum(line.quantity * line.unit_price_cents for line in extracted.lines)
    check(
        line_sum == extracted.total_cents,
        "lines add up to the total",
        f"lines add up to {line_sum} but the total says {extracted.total_cents}",
    )
    check(
        extracted.total_cents <= po.total_cents,
        "total within the PO",
        f"total {extracted.total_cents} exceeds the PO total {po.total_cents}",
    )
    return passed, reasons


def from_purchase_order(invoice: InvoiceReceived) -> ExtractedInvoice:
    """What a reviewer vouches for when they approve an invoice the model could not read."""
    po = invoice.purchase_order
    return ExtractedInvoice(
        invoice_number=invoice.invoice_id,
        vendor_id=po.vendor_id,
        po_number=po.po_number,
        currency=po.currency,
        total_cents=po.total_cents,
        lines=[
            InvoiceLine(description="as approved by reviewer", quantity=1, unit_price_cents=po.total_cents)
        ],
    )
