"""What the payment agent knows of a workflow, and the payment's idempotency key."""

from __future__ import annotations

from pydantic import BaseModel

SERVICE = "payment_agent"
"""The name this service publishes under (its ServiceSpec name, its consumer group)."""


class PaymentState(BaseModel):
    invoice_id: str = ""
    vendor_id: str = ""
    validated_cents: int = 0
    """The invoice's total as the invoice agent read it (and the budget agent checked)."""
    amount_cents: int = 0
    """What the budget agent reserved; paid only when it is the validated total."""
    currency: str = ""
    reservation_id: str = ""
    approved_by: str | None = None
    payment_id: str | None = None
    failed: bool = False

    @property
    def payable(self) -> bool:
        """Approved, and both facts a payment needs have arrived (in either order)."""
        return bool(
            self.approved_by
            and self.invoice_id
            and self.vendor_id
            and self.validated_cents
            and self.amount_cents
            and self.reservation_id
            and self.payment_id is None
            and not self.failed
        )


def amount_mismatch(state: PaymentState) -> str | None:
    """Why the reserved amount may not be paid: it is not the amount validated."""
    if state.amount_cents == state.validated_cents:
        return None
    reserved, validated = state.amount_cents, state.validated_cents
    return f"the reservation holds {reserved} cents but the validated invoice totals {validated}"


def payment_key(workflow_id: str, invoice_id: str) -> str:
    """One payment per invoice per workflow, whatever crashes or retries happen."""
    return f"pay:{workflow_id}:{invoice_id}"
