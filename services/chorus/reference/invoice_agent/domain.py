"""Invoice decisions: the extraction prompt and the checks of a reading against the claim.

No I/O here; handlers call the LLM through the adapter and these functions decide.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from pydantic import BaseModel

from chorus.codec import upcast
from chorus.contracts.base import invisible_characters
from chorus.contracts.procurement import ExtractedInvoice, InvoiceLine, InvoiceReceived, Reading
from chorus.llm import ChatMessage, reprompt

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
    awaiting_line: ExtractedInvoice | None = None
    """The reading whose lines fall short of its total: the submitter's line completes it."""
    awaiting_reading: Reading | None = None
    """How that reading was made (the validation states it once the line completes it)."""


STATE_VERSION = 3


def state_v1_to_v2(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of v1 holds an ``invoice.received`` v1 payload; read it as v2."""
    return {**state, "invoice": upcast("invoice.received", state["invoice"], 1, 2)}


def state_v2_to_v3(state: dict[str, Any]) -> dict[str, Any]:
    """v3 may wait for a line the reading missed: a v2 checkpoint waits for none."""
    return state


def extraction_prompt(document: str, feedback: list[str], reviewer_comment: str = "") -> list[ChatMessage]:
    schema = json.dumps(ExtractedInvoice.model_json_schema())
    system = (
        f"task: {TASK}\n"
        "You read supplier invoices. Answer with one JSON object matching this JSON Schema, "
        f"amounts in minor units (cents), nothing else:\n{schema}"
    )
    user = f"{DOCUMENT_START}\n{document}\n{DOCUMENT_END}"
    return reprompt(system, user, feedback, reviewer_comment)


def same_text(a: str, b: str) -> bool:
    """Equal as a reader would see them: compatibility forms and letter case aside."""
    return unicodedata.normalize("NFKC", a).casefold() == unicodedata.normalize("NFKC", b).casefold()


def shown(text: str) -> str:
    """``text`` for a reason a person reads: escaped when it hides characters (a look-alike)."""
    return ascii(text) if invisible_characters(text) else text


def check_against_claim(extracted: ExtractedInvoice, claim: InvoiceReceived) -> tuple[list[str], list[str]]:
    """(checks passed, reasons to reject): the document says what the submitter claims and
    adds up. Whether the purchase order allows it is the budget agent's check, against its
    records; an invoice is payable only with no reasons here and there."""
    passed: list[str] = []
    reasons: list[str] = []

    def check(ok: bool, good: str, bad: str) -> None:
        (passed if ok else reasons).append(good if ok else bad)

    check(
        same_text(extracted.invoice_number, claim.invoice_id),
        "invoice number matches the claim",
        f"the invoice is numbered {extracted.invoice_number}, the request says {claim.invoice_id}",
    )
    check(
        # The claim's vendor id is NFKC already (its type normalises it).
        unicodedata.normalize("NFKC", extracted.vendor_id) == claim.vendor_id,
        "vendor matches the claim",
        f"the invoice is from {shown(extracted.vendor_id)}, the request says {claim.vendor_id}",
    )
    check(
        same_text(extracted.po_number, claim.po_number),
        "PO number matches the claim",
        f"the invoice cites {extracted.po_number}, the request says {claim.po_number}",
    )
    check(
        extracted.currency == claim.currency,
        "currency matches the claim",
        f"the invoice is in {extracted.currency}, the request says {claim.currency}",
    )
    check(
        extracted.total_cents == claim.total_cents,
        "total matches the claim",
        f"the invoice totals {extracted.total_cents}, the request says {claim.total_cents}",
    )
    lines_cents = line_sum(extracted)
    check(
        lines_cents == extracted.total_cents,
        LINES_ADD_UP,
        f"lines add up to {lines_cents} but the total says {extracted.total_cents}",
    )
    return passed, reasons


LINES_ADD_UP = "lines add up to the total"


def line_sum(extracted: ExtractedInvoice) -> int:
    return sum(line.quantity * line.unit_price_cents for line in extracted.lines)


def only_a_line_missing(extracted: ExtractedInvoice, passed: list[str], reasons: list[str]) -> bool:
    """Whether the reading fails on nothing but lines that fall short of the total: what a
    line the submitter adds can mend (lines over the total cannot be mended by one more)."""
    return len(reasons) == 1 and LINES_ADD_UP not in passed and line_sum(extracted) < extracted.total_cents


def from_claim(invoice: InvoiceReceived) -> ExtractedInvoice:
    """What a reviewer vouches for when they approve an invoice the model could not read:
    the request's claim, amount included. The budget agent still checks it against the
    purchase order on record, so a reviewer cannot vouch an invoice past its PO."""
    return ExtractedInvoice(
        invoice_number=invoice.invoice_id,
        vendor_id=invoice.vendor_id,
        po_number=invoice.po_number,
        currency=invoice.currency,
        total_cents=invoice.total_cents,
        lines=[
            InvoiceLine(
                description="as approved by reviewer", quantity=1, unit_price_cents=invoice.total_cents
            )
        ],
    )
