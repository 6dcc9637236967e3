"""The notifier's declaration: what it consumes, its state, its tables, its loop and API."""

from __future__ import annotations

from chorus import __version__
from chorus.contracts.approvals import ApprovalDecided, ApprovalEscalated, ApprovalRouted
from chorus.contracts.lifecycle import WorkflowEnded, WorkflowStarted
from chorus.kernel.service import On, ServiceSpec
from chorus.platform.notifier.adapters.deliveries import DeliveryRetention, migrate
from chorus.platform.notifier.api import routes
from chorus.platform.notifier.bootstrap import Deps, bootstrap
from chorus.platform.notifier.delivery import deliver_due
from chorus.platform.notifier.domain import NotifierState
from chorus.platform.notifier.handlers import (
    on_approval_decided,
    on_approval_escalated,
    on_approval_routed,
    on_workflow_ended,
    on_workflow_started,
)

VERSION = __version__  # the release of Chorus it ships in

SPEC: ServiceSpec[NotifierState, Deps] = ServiceSpec(
    name="notifier",
    version=VERSION,
    handlers=[
        On(ApprovalRouted, on_approval_routed, timeout_s=30),
        On(ApprovalEscalated, on_approval_escalated, timeout_s=30),
        On(ApprovalDecided, on_approval_decided, timeout_s=30),
        On(WorkflowEnded, on_workflow_ended, timeout_s=30),
        # Who submitted it (a personal field, opened for this handler only).
        On(WorkflowStarted, on_workflow_started, timeout_s=30, personal=True),
    ],
    produces=frozenset({"submitter.notified"}),
    state=NotifierState,
    migrations=[migrate],
    owned_data=[DeliveryRetention()],
    bootstrap=bootstrap,
    workers=[deliver_due],
    http_routes=routes,
)
