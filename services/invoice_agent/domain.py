"""Invoice decisions: the extraction prompt, the deterministic offline reading, PO checks.

No I/O here; handlers call the LLM through the adapter and these functions decide.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel

from chorus.llm import ChatMessage
from chorus_contracts.procurement import ExtractedInvoice, InvoiceLine, InvoiceReceived, PurchaseOrder

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
    if feedback:
        user += "\nYour previous answer was invalid:\n" + "\n".join(f"- {e}" for e in feedback)
    if reviewer_comment:
        user += f"\nA reviewer commented: {reviewer_comment}"
    return [ChatMessage("system", system), ChatMessage("user", user)]


def _cents(text: str) -> int:
    whole, _, frac = text.replace(",", "").partition(".")
    return int(whole) * 100 + int((frac + "00")[:2])


def offline_extract(messages: list[ChatMessage]) -> str:
    """The deterministic offline model's reading of an invoice (regular expressions).

    A document containing UNREADABLE yields an answer without a total, however
    often it is asked: that is how tests and the demo reach human review.
    """
    user = messages[-1].content
    document = user.split(DOCUMENT_START, 1)[-1].split(DOCUMENT_END, 1)[0]

    def field(label: str) -> str:
        match = re.search(rf"^{label}:\s*(\S+)", document, re.MULTILINE | re.IGNORECASE)
        return match.group(1) if match else ""

    number = re.search(r"INVOICE\s+(\S+)", document)
    total = re.search(r"^Total:\s*([\d.,]+)\s*([A-Z]{3})?", document, re.MULTILINE)
    lines = [
        {
            "description": m.group(2).strip(),
            "quantity": int(m.group(1)),
            "unit_price_cents": _cents(m.group(3)),
        }
        for m in re.finditer(r"^(\d+)\s*x\s*(.+?)\s*@\s*([\d.,]+)", document, re.MULTILINE)
    ]
    answer: dict[str, object] = {
        "invoice_number": number.group(1) if number else "",
        "vendor_id": field("Vendor"),
        "po_number": field("PO"),
        "currency": (total.group(2) if total and total.group(2) else field("Currency")) or "",
        "lines": lines,
    }
    if total and "UNREADABLE" not in document:
        answer["total_cents"] = _cents(total.group(1))
    return json.dumps(answer)


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
