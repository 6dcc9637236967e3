"""The notifier's declaration: what it consumes, its state, its tables, its loop and API."""

from __future__ import annotations

from chorus.kernel.service import On, ServiceSpec
from chorus_contracts.approvals import ApprovalDecided, ApprovalEscalated, ApprovalRouted
from chorus_contracts.lifecycle import WorkflowEnded
from notifier.adapters.deliveries import DeliveryRetention, migrate
from notifier.api import routes
from notifier.bootstrap import Deps, bootstrap
from notifier.delivery import deliver_due
from notifier.domain import NotifierState
from notifier.handlers import (
    on_approval_decided,
    on_approval_escalated,
    on_approval_routed,
    on_workflow_ended,
)

VERSION = "0.1.0"

SPEC: ServiceSpec[NotifierState, Deps] = ServiceSpec(
    name="notifier",
    version=VERSION,
    handlers=[
        On(ApprovalRouted, on_approval_routed, timeout_s=30),
        On(ApprovalEscalated, on_approval_escalated, timeout_s=30),
        On(ApprovalDecided, on_approval_decided, timeout_s=30),
        On(WorkflowEnded, on_workflow_ended, timeout_s=30),
    ],
    state=NotifierState,
    migrations=[migrate],
    owned_data=[DeliveryRetention()],
    bootstrap=bootstrap,
    workers=[deliver_due],
    http_routes=routes,
)
