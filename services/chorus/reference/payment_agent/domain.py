"""What the payment agent knows of a workflow, and the payment's idempotency key."""

from __future__ import annotations

import unicodedata
from typing import Any

from pydantic import BaseModel

SERVICE = "payment_agent"
"""The name this service publishes under (its ServiceSpec name, its consumer group)."""
STATE_VERSION = 2


def state_v1_to_v2(state: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of v1 knows no vendor of record: it pays whom the invoice names, as v1 did."""
    return {**state, "vendor_of_record": ""}


class PaymentState(BaseModel):
    invoice_id: str = ""
    vendor_id: str = ""
    validated_cents: int = 0
    """The invoice's total as the invoice agent read it (and the budget agent checked)."""
    amount_cents: int = 0
    """What the budget agent reserved; paid only when it is the validated total."""
    currency: str = ""
    reservation_id: str = ""
    vendor_of_record: str = ""
    """Whom the reservation says to pay: its purchase order's vendor (the budget agent's
    signed fact). Empty for a reservation made before it was stated."""
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


def payee(state: PaymentState) -> str:
    """Whom to pay: the purchase order's vendor of record, never the model's reading of the
    invoice (which the budget agent compared to it)."""
    return state.vendor_of_record or state.vendor_id


def vendor_mismatch(state: PaymentState) -> str | None:
    """Why the vendor of record may not be paid: the invoice, read the way the budget agent
    reads it (compatibility forms folded), names another vendor."""
    if not state.vendor_of_record:
        return None
    read = unicodedata.normalize("NFKC", state.vendor_id)
    if read == state.vendor_of_record:
        return None
    return f"the invoice names {read!a}; its purchase order's vendor of record is {state.vendor_of_record}"


def payment_key(workflow_id: str, invoice_id: str) -> str:
    """One payment per invoice per workflow, whatever crashes or retries happen."""
    return f"pay:{workflow_id}:{invoice_id}"
