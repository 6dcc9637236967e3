"""The invoice agent's declaration."""

from __future__ import annotations

from chorus.service import WORKFLOW_END, On, ServiceSpec
from chorus_contracts.approvals import ApprovalDecided
from chorus_contracts.procurement import InvoiceReceived
from invoice_agent.bootstrap import Deps, bootstrap
from invoice_agent.domain import SERVICE, STATE_VERSION, InvoiceState, state_v1_to_v2
from invoice_agent.handlers import on_approval_decided, on_invoice_received

SPEC: ServiceSpec[InvoiceState, Deps] = ServiceSpec(
    name=SERVICE,
    version="0.1.0",
    handlers=[
        # An LLM reading can take minutes; three tries with the validation errors
        # as feedback, then a person reviews it.
        On(InvoiceReceived, on_invoice_received, timeout_s=300, semantic_attempts=3),
        # Reads the reviewer's comment (a revision) and who decided (the end's reason).
        On(ApprovalDecided, on_approval_decided, timeout_s=300, semantic_attempts=3, personal=True),
        WORKFLOW_END,
    ],
    produces=frozenset({"invoice.validated", "invoice.rejected", "workflow.ended"}),
    state=InvoiceState,
    state_version=STATE_VERSION,
    state_migrations={1: state_v1_to_v2},
    bootstrap=bootstrap,
)
