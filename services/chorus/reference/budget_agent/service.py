"""The budget agent's declaration."""

from __future__ import annotations

from chorus import __version__
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.procurement import InvoiceValidated, PaymentFailed
from chorus.reference.budget_agent.adapters.ledger import migrate
from chorus.reference.budget_agent.bootstrap import Deps, bootstrap
from chorus.reference.budget_agent.domain import SERVICE, BudgetState
from chorus.reference.budget_agent.handlers import (
    on_approval_decided,
    on_invoice_validated,
    on_payment_failed,
    on_reset,
    on_workflow_ended,
)
from chorus.service import On, ServiceSpec

SPEC: ServiceSpec[BudgetState, Deps] = ServiceSpec(
    name=SERVICE,
    version=__version__,
    handlers=[
        On(InvoiceValidated, on_invoice_validated, timeout_s=30),
        On(ApprovalDecided, on_approval_decided, timeout_s=30),
        On(PaymentFailed, on_payment_failed, timeout_s=30),
        On(WorkflowEnded, on_workflow_ended, timeout_s=30),
    ],
    produces=frozenset(
        {
            "budget.reserved",
            "budget.rejected",
            "invoice.rejected",
            "budget.released",
            "approval.requested",
            "workflow.ended",
        }
    ),
    state=BudgetState,
    migrations=[migrate],
    bootstrap=bootstrap,
    on_reset=on_reset,
)
