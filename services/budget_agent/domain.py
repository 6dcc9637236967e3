"""Budget decisions, free of I/O."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from chorus_contracts.approvals import ApprovalContext, ApprovalRequested, EscalationStep, Fallback
from chorus_contracts.procurement import InvoiceValidated

SERVICE = "budget_agent"
"""The name this service publishes under (its ServiceSpec name, its consumer group)."""


class BudgetState(BaseModel):
    invoice_id: str
    cost_center: str
    amount_cents: int
    currency: str
    reservation_id: str | None = None
    status: Literal["reserved", "released", "rejected"] = "reserved"
    approval_rounds: int = 0
    requester_ref: str = ""


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
        approval_id=f"appr-{workflow_id}-{state.approval_rounds}",
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
            steps_taken=[*validated.checks, f"{amount} reserved on {state.cost_center}"],
            why="every procurement payment needs a person's approval"
            + (" (revised reading)" if state.approval_rounds > 1 else ""),
        ),
    )
