"""The invoice agent's declaration."""

from __future__ import annotations

from chorus import __version__
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.procurement import InvoiceLineAdded, InvoiceReceived
from chorus.reference.invoice_agent.bootstrap import Deps, bootstrap
from chorus.reference.invoice_agent.domain import (
    SERVICE,
    STATE_VERSION,
    InvoiceState,
    state_v1_to_v2,
    state_v2_to_v3,
)
from chorus.reference.invoice_agent.handlers import on_approval_decided, on_invoice_received, on_line_added
from chorus.service import WORKFLOW_END, On, ServiceSpec

SPEC: ServiceSpec[InvoiceState, Deps] = ServiceSpec(
    name=SERVICE,
    version=__version__,
    handlers=[
        # An LLM reading can take minutes; three tries with the validation errors
        # as feedback, then a person reviews it.
        On(InvoiceReceived, on_invoice_received, timeout_s=300, semantic_attempts=3),
        # Reads the reviewer's comment (a revision) and who decided (the end's reason).
        On(ApprovalDecided, on_approval_decided, timeout_s=300, semantic_attempts=3, personal=True),
        # The submitter's signal add_line: answered (invoice.line_checked) in its own step.
        On(InvoiceLineAdded, on_line_added, timeout_s=30),
        WORKFLOW_END,
    ],
    produces=frozenset(
        {
            "invoice.validated",
            "invoice.rejected",
            "invoice.correction_requested",
            "invoice.line_checked",
            "workflow.ended",
        }
    ),
    state=InvoiceState,
    state_version=STATE_VERSION,
    state_migrations={1: state_v1_to_v2, 2: state_v2_to_v3},
    bootstrap=bootstrap,
)
