"""The procurement workflow: invoice -> validation -> budget -> approval -> payment (saga)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from chorus_contracts.base import Cents, Currency, EventModel, Model, Name, event


class InvoiceLine(Model):
    description: Name
    quantity: int = Field(ge=1)
    unit_price_cents: Cents


class PurchaseOrder(Model):
    po_number: Name
    vendor_id: Name
    currency: Currency
    total_cents: Cents
    cost_center: Name


@event("invoice.received", 1)
class InvoiceReceived(EventModel):
    """Start of a procurement workflow. The document text is what the LLM reads."""

    invoice_id: Name
    vendor_id: Name
    document_text: str = Field(min_length=1, max_length=20000)
    purchase_order: PurchaseOrder
    requester_ref: Name = Field(description="reference to the requester (no personal data)")


class ExtractedInvoice(Model):
    """The LLM's structured reading of the invoice (schema-validated output)."""

    invoice_number: Name
    vendor_id: Name
    po_number: Name
    currency: Currency
    total_cents: Cents
    lines: list[InvoiceLine] = Field(min_length=1)


@event("invoice.validated", 1)
class InvoiceValidated(EventModel):
    invoice_id: Name
    extracted: ExtractedInvoice
    checks: list[str]
    cost_center: Name


@event("invoice.rejected", 1)
class InvoiceRejected(EventModel):
    invoice_id: Name
    reasons: list[str] = Field(min_length=1)


@event("budget.reserved", 1)
class BudgetReserved(EventModel):
    invoice_id: Name
    reservation_id: Name
    cost_center: Name
    amount_cents: Cents
    currency: Currency


@event("budget.rejected", 1)
class BudgetRejected(EventModel):
    invoice_id: Name
    cost_center: Name
    requested_cents: Cents
    available_cents: int


@event("payment.issued", 1)
class PaymentIssued(EventModel):
    invoice_id: Name
    payment_id: Name
    provider_reference: Name
    amount_cents: Cents
    currency: Currency


@event("payment.failed", 1)
class PaymentFailed(EventModel):
    invoice_id: Name
    reason: str
    category: Literal["persistent", "rejected_by_provider", "exhausted_retries"]


@event("budget.released", 1)
class BudgetReleased(EventModel):
    """Compensation: a reservation given back (payment failed, rejected, or timed out)."""

    invoice_id: Name
    reservation_id: Name
    amount_cents: Cents
    reason: str


@event("requester.notified", 1)
class RequesterNotified(EventModel):
    invoice_id: Name
    requester_ref: Name
    template: Name
