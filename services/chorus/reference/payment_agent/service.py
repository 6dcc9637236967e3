"""The payment agent's declaration."""

from __future__ import annotations

from chorus import __version__
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.procurement import BudgetReserved, InvoiceValidated
from chorus.reference.payment_agent.bootstrap import Deps, bootstrap
from chorus.reference.payment_agent.domain import SERVICE, STATE_VERSION, PaymentState, state_v1_to_v2
from chorus.reference.payment_agent.handlers import (
    on_approval_decided,
    on_budget_reserved,
    on_invoice_validated,
)
from chorus.service import WORKFLOW_END, On, ServiceSpec

SPEC: ServiceSpec[PaymentState, Deps] = ServiceSpec(
    name=SERVICE,
    version=__version__,
    handlers=[
        # Any of the three may be the last fact needed and so make the payment. The
        # agent turns exhausted retries into payment.failed itself, so the runtime's
        # cap is one attempt above the agent's own.
        On(InvoiceValidated, on_invoice_validated, timeout_s=60, max_attempts=7, backoff_cap_s=60),
        On(BudgetReserved, on_budget_reserved, timeout_s=60, max_attempts=7, backoff_cap_s=60),
        On(ApprovalDecided, on_approval_decided, timeout_s=60, max_attempts=7, backoff_cap_s=60),
        WORKFLOW_END,
    ],
    produces=frozenset({"payment.issued", "payment.failed", "workflow.ended"}),
    state=PaymentState,
    state_version=STATE_VERSION,
    state_migrations={1: state_v1_to_v2},
    bootstrap=bootstrap,
)
