"""Settings of the budget agent (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.contracts.approvals import EscalationStep, Fallback
from chorus.reference.budget_agent.domain import PurchaseOrder
from chorus.runtime.runner import ServiceSettings


class Settings(ServiceSettings):
    http_port: int = 8112
    budgets: dict[str, int] = {
        "cc-research": 5_000_000,
        "cc-ops": 2_000_000,
        "cc-marketing": 100_000,
    }
    """Cost center -> budget in cents, created when missing (existing budgets are kept)."""
    purchase_orders: list[PurchaseOrder] = [
        PurchaseOrder(
            po_number="PO-7781",
            vendor_id="vendor-acme",
            currency="EUR",
            total_cents=150_000,
            cost_center="cc-research",
        )
    ]
    """Purchase orders recorded when missing (existing ones are kept): the demo's. A real
    deployment fills ``budget_agent.purchase_orders`` from its procurement system."""
    approval_chain: list[EscalationStep] = [
        EscalationStep(tier="manager", window_s=8 * 3600),
        EscalationStep(tier="director", window_s=8 * 3600),
    ]
    """Who approves a procurement and how long each tier has before it escalates."""
    approval_fallback: Fallback = "auto_reject"
