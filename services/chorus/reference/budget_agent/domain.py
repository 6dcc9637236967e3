"""Budget decisions, free of I/O."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from chorus.contracts.approvals import (
    ApprovalContext,
    ApprovalFacts,
    ApprovalRequested,
    EscalationStep,
    Fallback,
)
from chorus.contracts.base import Cents, Currency, Model, Ref, VendorId, invisible_characters, is_invisible
from chorus.contracts.procurement import ExtractedInvoice, InvoiceValidated, budget_approval_id

SERVICE = "budget_agent"
"""The name this service publishes under (its ServiceSpec name, its consumer group)."""


class PurchaseOrder(Model):
    """A purchase order on record (table ``purchase_orders``): what may be invoiced against it."""

    po_number: Ref
    vendor_id: VendorId
    currency: Currency
    total_cents: Cents
    cost_center: Ref
    invoiced_cents: Cents = 0
    """What reservations not given back hold against it (the ledger's count; an order
    configured on record starts at 0)."""

    @property
    def remaining_cents(self) -> int:
        return self.total_cents - self.invoiced_cents


class BudgetState(BaseModel):
    invoice_id: str
    cost_center: str
    amount_cents: int
    currency: str
    reservation_id: str | None = None
    status: Literal["reserved", "released", "rejected"] = "reserved"
    approval_rounds: int = 0
    po_number: str = ""
    vendor_id: str = ""
    invoice_number: str = ""
    """What the reservation was made for: a revised reading must say the same."""
    approved: bool = False
    """A person approved the payment: from then on it may have gone out."""


@dataclass(frozen=True)
class Refusal:
    """Why an invoice is not paid, as a code a program acts on and a sentence a person reads."""

    code: str
    detail: str


def check_against_po(extracted: ExtractedInvoice, po: PurchaseOrder | None) -> Refusal | None:
    """The invoice against its purchase order on record; None when it may be paid."""
    if po is None:
        return Refusal("unknown_po", f"no purchase order {extracted.po_number} on record")
    vendor = unicodedata.normalize("NFKC", extracted.vendor_id)
    if invisible_characters(vendor):
        return Refusal(
            "vendor_mismatch",
            f"the vendor id {vendor!a} hides characters; {po.po_number} is for {po.vendor_id}",
        )
    if vendor != po.vendor_id:
        return Refusal("vendor_mismatch", f"{po.po_number} is for {po.vendor_id}, not {vendor}")
    if extracted.currency != po.currency:
        return Refusal("currency_mismatch", f"{po.po_number} is in {po.currency}, not {extracted.currency}")
    if extracted.total_cents > po.total_cents:
        return Refusal(
            "over_po", f"the invoice totals {extracted.total_cents}, {po.po_number} allows {po.total_cents}"
        )
    if extracted.total_cents > po.remaining_cents:
        # Several invoices against one order: together they may not exceed it.
        return Refusal(
            "over_po",
            f"the invoice totals {extracted.total_cents}, {po.po_number} has {po.remaining_cents} "
            f"of {po.total_cents} left (the rest is invoiced already)",
        )
    return None


def invoice_key(vendor_id: str, invoice_number: str) -> tuple[str, str]:
    """The identity of an invoice for "paid at most once": the vendor on record and the
    number as a reader sees it (compatibility forms, case and invisible characters aside),
    so "INV-1" and "inv\u200b-1" from one vendor are one invoice."""
    number = unicodedata.normalize("NFKC", invoice_number).casefold()
    return vendor_id, "".join(c for c in number if not is_invisible(c))


def reservation_id(workflow_id: str, invoice_id: str) -> str:
    return f"res-{workflow_id}-{invoice_id}"


def approval_request(
    state: BudgetState,
    validated: InvoiceValidated,
    workflow_id: str,
    chain: list[EscalationStep],
    fallback: Fallback,
) -> ApprovalRequested:
    amount = f"{state.amount_cents / 100:.2f} {state.currency}"
    return ApprovalRequested(
        approval_id=budget_approval_id(workflow_id, state.approval_rounds),
        requested_by=SERVICE,
        chain=chain,
        fallback=fallback,
        context=ApprovalContext(
            summary=f"Invoice {validated.invoice_id} from {validated.extracted.vendor_id}: {amount} "
            f"against {validated.extracted.po_number}",
            inputs={
                "invoice_id": validated.invoice_id,
                "vendor_id": validated.extracted.vendor_id,
                "po_number": validated.extracted.po_number,
                "amount_cents": state.amount_cents,
                "currency": state.currency,
                "cost_center": state.cost_center,
            },
            steps_taken=[*(c.check for c in validated.checks), f"{amount} reserved on {state.cost_center}"],
            why="every procurement payment needs a person's approval"
            + (" (revised reading)" if state.approval_rounds > 1 else ""),
        ),
        # What the gate's approval policy routes on (a large amount goes to the director).
        facts=ApprovalFacts(amount_cents=state.amount_cents, business_unit=state.cost_center or None),
    )


def what_changed(state: BudgetState, extracted: ExtractedInvoice) -> list[str]:
    """What a revised reading says differently from the one the reservation was made for."""
    vendor = unicodedata.normalize("NFKC", extracted.vendor_id)
    changes = {
        "purchase order": extracted.po_number != state.po_number,
        "vendor": vendor != state.vendor_id,
        "invoice number": invoice_key(vendor, extracted.invoice_number)
        != invoice_key(vendor, state.invoice_number),
        "currency": extracted.currency != state.currency,
        "amount": extracted.total_cents != state.amount_cents,
    }
    return [what for what, changed in changes.items() if changed]
