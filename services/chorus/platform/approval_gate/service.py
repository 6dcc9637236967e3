"""The approval gate's declaration."""

from __future__ import annotations

from chorus import __version__
from chorus.contracts.approvals import (
    ApprovalDecisionSubmitted,
    ApprovalRequested,
    ApprovalWindowElapsed,
)
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.platform import ReviewRequested
from chorus.kernel.service import On, ServiceSpec
from chorus.platform.approval_gate.adapters.policies import migrate
from chorus.platform.approval_gate.api import routes
from chorus.platform.approval_gate.bootstrap import Deps, bootstrap
from chorus.platform.approval_gate.domain import Gate
from chorus.platform.approval_gate.handlers import (
    on_approval_decision_submitted,
    on_approval_requested,
    on_approval_window_elapsed,
    on_review_requested,
    on_workflow_ended,
)

SPEC: ServiceSpec[Gate, Deps] = ServiceSpec(
    name="approval_gate",
    version=__version__,
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
