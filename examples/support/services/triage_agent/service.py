"""triage_agent's declaration: what it handles, what it emits, its state."""

from __future__ import annotations

from chorus.contracts.approvals import ApprovalDecided
from chorus.service import WORKFLOW_END, On, ServiceSpec

from support_contracts.events import TicketReceived, TicketReplyDue
from triage_agent.bootstrap import Deps, bootstrap
from triage_agent.domain import SERVICE, TriageState
from triage_agent.handlers import on_approval_decided, on_ticket_received, on_ticket_reply_due

SPEC: ServiceSpec[TriageState, Deps] = ServiceSpec(
    name=SERVICE,
    version="0.1.0",
    handlers=[
        # The model may take a while; a wrong answer is re-prompted twice before a person looks.
        On(TicketReceived, on_ticket_received, timeout_s=120, semantic_attempts=3),
        On(ApprovalDecided, on_approval_decided, timeout_s=60),
        On(TicketReplyDue, on_ticket_reply_due, timeout_s=30),
        WORKFLOW_END,
    ],
    produces=frozenset(
        {
            "ticket.answered",
            "ticket.reply_due",
            "approval.requested",
            "workflow.ended",
            "workflow.spend_recorded",
            "agent.turn_recorded",
            "agent.output_streamed",
        }
    ),
    state=TriageState,
    bootstrap=bootstrap,
)
