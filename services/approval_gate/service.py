"""The approval gate's declaration."""

from __future__ import annotations

from approval_gate.adapters.policies import migrate
from approval_gate.api import routes
from approval_gate.bootstrap import Deps, bootstrap
from approval_gate.domain import Gate
from approval_gate.handlers import (
    on_approval_decision_submitted,
    on_approval_requested,
    on_approval_window_elapsed,
    on_review_requested,
    on_workflow_ended,
)
from chorus.kernel.service import On, ServiceSpec
from chorus_contracts.approvals import (
    ApprovalDecisionSubmitted,
    ApprovalRequested,
    ApprovalWindowElapsed,
)
from chorus_contracts.lifecycle import WorkflowEnded
from chorus_contracts.platform import ReviewRequested

SPEC: ServiceSpec[Gate, Deps] = ServiceSpec(
    name="approval_gate",
    version="0.1.0",
    handlers=[
        On(ApprovalRequested, on_approval_requested, timeout_s=30),
        On(ApprovalWindowElapsed, on_approval_window_elapsed, timeout_s=30),
        On(ApprovalDecisionSubmitted, on_approval_decision_submitted, timeout_s=30),
        On(ReviewRequested, on_review_requested, timeout_s=30),
        On(WorkflowEnded, on_workflow_ended, timeout_s=30),
    ],
    produces=frozenset(
        {
            "approval.requested",
            "approval.routed",
            "approval.escalated",
            "approval.decided",
            "approval.window_elapsed",
        }
    ),
    state=Gate,
    migrations=[migrate],
    bootstrap=bootstrap,
    http_routes=routes,
)
