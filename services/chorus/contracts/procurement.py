"""The procurement workflow: invoice -> validation -> budget -> approval -> payment (saga)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from chorus.contracts.base import (
    Cents,
    Currency,
    EventModel,
    LongText,
    Model,
    Name,
    Personal,
    Ref,
    Text,
    VendorId,
    event,
    upcaster,
)
from chorus.contracts.lifecycle import AwaitsSignal, Signal, SignalAnswer


class InvoiceLine(Model):
    description: Name
    quantity: int = Field(ge=1, le=10**9)
    unit_price_cents: Cents


# v1 only: the purchase order as the submitter stated it. v2 names the PO, and the budget
# agent's records say what it is. (Comments, not docstrings: those would change v1's schema.)
class PurchaseOrder(Model):
    po_number: Ref
    vendor_id: Ref
    currency: Currency
    total_cents: Cents
    cost_center: Ref


# v1 carried the purchase order itself, which nothing should trust (the submitter wrote
# it); consumers read it as v2.
@event("invoice.received", 1)
class InvoiceReceivedV1(EventModel):
    """Start of a procurement workflow. The document text is what the LLM reads."""

    invoice_id: Ref
    vendor_id: Ref
    document_text: Personal[LongText] = Field(min_length=1)
    purchase_order: PurchaseOrder
    requester_ref: Ref = Field(description="reference to the requester (no personal data)")


@event("invoice.received", 2)
class InvoiceReceived(EventModel):
    """Start of a procurement workflow: what the submitter claims, and the document.

    The claim (invoice number, vendor, purchase order number, amount) is checked against
    the document by the invoice agent and against the purchase order on record by the
    budget agent; the request carries no purchase order of its own. The document text is
    what the LLM reads."""

    invoice_id: Ref = Field(description="the invoice's number, as printed on it")
    vendor_id: VendorId
    po_number: Ref = Field(
        description="the purchase order the invoice bills (on record with the budget agent)"
    )
    currency: Currency
    total_cents: Cents = Field(description="the amount the invoice asks for")
    document_text: Personal[LongText] = Field(min_length=1)
    requester_ref: Ref = Field(description="reference to the requester (no personal data)")


@upcaster("invoice.received", 1)
def _invoice_received_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # v1 declared no amount of its own: its purchase order's figures stand in. So a v1
    # invoice whose total is not its PO's total is rejected as not matching the claim;
    # the PO's vendor, total and cost center are no longer believed (the record decides).
    body = dict(payload)
    po = body.pop("purchase_order", None) or {}
    body.update(po_number=po.get("po_number"), currency=po.get("currency"), total_cents=po.get("total_cents"))
    return body


class ExtractedInvoice(Model):
    """The LLM's structured reading of the invoice (schema-validated output)."""

    invoice_number: Name
    vendor_id: Name
    po_number: Name
    currency: Currency
    total_cents: Cents
    lines: list[InvoiceLine] = Field(min_length=1, max_length=1000)


# v1 carried the cost center of the submitter's purchase order; consumers read it as v2.
@event("invoice.validated", 1)
class InvoiceValidatedV1(EventModel):
    invoice_id: Ref
    extracted: ExtractedInvoice
    checks: list[Text] = Field(max_length=100)
    cost_center: Ref


# v2 said its checks as sentences only; consumers read it as v3.
@event("invoice.validated", 2)
class InvoiceValidatedV2(EventModel):
    """The invoice reads cleanly and says what the submitter claimed."""

    invoice_id: Ref
    extracted: ExtractedInvoice
    checks: list[Text] = Field(max_length=100)


class CheckResult(Model):
    """One check of the reading against the submitter's claim."""

    check: Text
    passed: bool


class Reading(Model):
    """How the invoice was read: what tells releases and models apart in a rollout."""

    model: Name = Field(description="the language model that read it")
    attempts: int = Field(ge=1, le=100, description="readings until one passed validation")


@event("invoice.validated", 3)
class InvoiceValidated(EventModel):
    """The invoice reads cleanly and says what the submitter claimed. Not yet checked
    against the purchase order on record: the budget agent does that before it reserves."""

    invoice_id: Ref
    extracted: ExtractedInvoice
    checks: list[CheckResult] = Field(max_length=100)
    reading: Reading | None = Field(
        default=None, description="how it was read; none when a reviewer vouched for the claim, or from v2"
    )


@upcaster("invoice.validated", 1)
def _invoice_validated_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # The cost center comes from the purchase order on record now, never from the request.
    return {k: v for k, v in payload.items() if k != "cost_center"}


@upcaster("invoice.validated", 2)
def _invoice_validated_v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    # A v2 event lists the checks that passed (it is only published when all do).
    return {**payload, "checks": [{"check": check, "passed": True} for check in payload["checks"]]}


@event("invoice.rejected", 1)
class InvoiceRejected(EventModel):
    """The invoice will not be paid: it does not read as claimed (invoice agent), or it does
    not match its purchase order on record or was paid already (budget agent)."""

    invoice_id: Ref
    reasons: list[Text] = Field(min_length=1, max_length=50)
    code: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z][a-z_]*$",
        description="one cause a program can act on: unknown_po, vendor_mismatch, currency_mismatch, "
        "over_po, duplicate_invoice (absent when the reasons are the document's checks)",
    )


@event("invoice.correction_requested", 1)
class InvoiceCorrectionRequested(AwaitsSignal):
    """The invoice reads as claimed, but its lines add up to less than its total: a line is
    missing from the reading. The invoice agent waits for the submitter to add it (the
    signal ``add_line``: ``invoice.line_added``) until the workflow's deadline."""

    awaits: ClassVar[str] = "add_line"

    invoice_id: Ref
    reasons: list[Text] = Field(min_length=1, max_length=50)
    missing_cents: Cents = Field(description="what the lines fall short of the total by")


@event("invoice.line_added", 1)
class InvoiceLineAdded(Signal):
    """The submitter's signal ``add_line``: a line of the invoice the reading missed."""

    line: InvoiceLine


@event("invoice.line_checked", 1)
class InvoiceLineChecked(SignalAnswer):
    """The invoice agent's answer to ``add_line``: accepted when, with the line, the lines add
    up to the total (the invoice is validated in the same step); otherwise nothing changed."""

    invoice_id: Ref
    lines_cents: Cents = Field(description="what the lines add up to with the line added")
    total_cents: Cents


@event("budget.reserved", 1)
class BudgetReserved(EventModel):
    invoice_id: Ref
    reservation_id: Ref
    cost_center: Ref
    amount_cents: Cents
    currency: Currency
    po_number: Ref | None = None
    """The purchase order the amount is reserved against."""
    vendor_id: VendorId | None = None
    """Its vendor of record: whom the payment agent pays (never the model's reading of the
    invoice). Absent only from reservations made before it was stated."""


def budget_approval_id(workflow_id: str, round_: int) -> str:
    """The id of the budget agent's approval request for a procurement, round by round (a
    revised reading asks again). The payment agent pays on one of these only: an approval
    anyone else asked for (a review, say) approves nothing that moves money."""
    return f"{_budget_approvals(workflow_id)}{round_}"


def is_budget_approval(approval_id: str, workflow_id: str) -> bool:
    """Whether ``approval_id`` is one of the budget agent's rounds for ``workflow_id``."""
    round_ = approval_id.removeprefix(_budget_approvals(workflow_id))
    return round_ != approval_id and round_.isdigit()


def _budget_approvals(workflow_id: str) -> str:
    return f"appr-{workflow_id}-"


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
    """No longer emitted: before 1.1.0 the budget agent stated it when a payment failed,
    though no message went to anyone. Kept so records written then still read; the
    notifier's ``submitter.notified`` states a message the submitter's channel took."""

    invoice_id: Ref
    requester_ref: Ref
    template: Name
