"""The report agent's declaration."""

from __future__ import annotations

from chorus.service import WORKFLOW_END, On, ServiceSpec
from chorus_contracts.approvals import ApprovalDecided
from chorus_contracts.research import ReportRequested
from report_agent.bootstrap import Deps, bootstrap
from report_agent.domain import SERVICE, ReportState
from report_agent.handlers import on_approval_decided, on_report_requested

SPEC: ServiceSpec[ReportState, Deps] = ServiceSpec(
    name=SERVICE,
    version="0.1.0",
    handlers=[
        # Gathering three sources and drafting can take minutes; a flaky source is
        # retried with durable backoff while the checkpoint keeps what was gathered.
        On(
            ReportRequested,
            on_report_requested,
            timeout_s=600,
            max_attempts=8,
            backoff_base_s=0.5,
            backoff_cap_s=30,
        ),
        On(
            ApprovalDecided,
            on_approval_decided,
            timeout_s=300,
            max_attempts=8,
            backoff_base_s=0.5,
            backoff_cap_s=30,
        ),
        WORKFLOW_END,
    ],
    produces=frozenset({"report.drafted", "report.delivered", "approval.requested", "workflow.ended"}),
    state=ReportState,
    bootstrap=bootstrap,
)
