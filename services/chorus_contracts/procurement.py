"""The procurement workflow: invoice -> validation -> budget -> approval -> payment (saga)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from chorus_contracts.base import Cents, Currency, EventModel, LongText, Model, Name, Ref, Text, event


class InvoiceLine(Model):
    description: Name
    quantity: int = Field(ge=1, le=10**9)
    unit_price_cents: Cents


class PurchaseOrder(Model):
    po_number: Ref
    vendor_id: Ref
    currency: Currency
    total_cents: Cents
    cost_center: Ref


@event("invoice.received", 1)
class InvoiceReceived(EventModel):
    """Start of a procurement workflow. The document text is what the LLM reads."""

    invoice_id: Ref
    vendor_id: Ref
    document_text: LongText = Field(min_length=1)
    purchase_order: PurchaseOrder
    requester_ref: Ref = Field(description="reference to the requester (no personal data)")


class ExtractedInvoice(Model):
    """The LLM's structured reading of the invoice (schema-validated output)."""

    invoice_number: Name
    vendor_id: Name
    po_number: Name
    currency: Currency
    total_cents: Cents
    lines: list[InvoiceLine] = Field(min_length=1, max_length=1000)


@event("invoice.validated", 1)
class InvoiceValidated(EventModel):
    invoice_id: Ref
    extracted: ExtractedInvoice
    checks: list[Text] = Field(max_length=100)
    cost_center: Ref


@event("invoice.rejected", 1)
class InvoiceRejected(EventModel):
    invoice_id: Ref
    reasons: list[Text] = Field(min_length=1, max_length=50)


@event("budget.reserved", 1)
class BudgetReserved(EventModel):
    invoice_id: Ref
    reservation_id: Ref
    cost_center: Ref
    amount_cents: Cents
    currency: Currency


@event("budget.rejected", 1)
class BudgetRejected(EventModel):
    invoice_id: Ref
    cost_center: Ref
    requested_cents: Cents
    available_cents: int = Field(ge=-(2**53 - 1), le=2**53 - 1)


@event("payment.issued", 1)
class PaymentIssued(EventModel):
    invoice_id: Ref
    payment_id: Ref
    provider_reference: Name
    amount_cents: Cents
    currency: Currency


@event("payment.failed", 1)
class PaymentFailed(EventModel):
    invoice_id: Ref
    reason: Text
    category: Literal["persistent", "rejected_by_provider", "exhausted_retries"]


@event("budget.released", 1)
class BudgetReleased(EventModel):
    """Compensation: a reservation given back (payment failed, rejected, or timed out)."""

    invoice_id: Ref
    reservation_id: Ref
    amount_cents: Cents
    reason: Text


@event("requester.notified", 1)
class RequesterNotified(EventModel):
    invoice_id: Ref
    requester_ref: Ref
    template: Name
