"""The report agent's declaration."""

from __future__ import annotations

import functools

from chorus import __version__
from chorus.contracts.approvals import ApprovalDecided
from chorus.contracts.lifecycle import StageDeadlineReached
from chorus.contracts.research import ReportRequested, SourceFetched, SourceFetchFailed
from chorus.reference.report_agent.bootstrap import Deps, bootstrap
from chorus.reference.report_agent.domain import SERVICE, ReportState
from chorus.reference.report_agent.handlers import (
    on_approval_decided,
    on_report_requested,
    on_source_fetch_failed,
    on_source_fetched,
    on_stage_deadline_reached,
)
from chorus.service import WORKFLOW_END, On, ServiceSpec

# The step that closes the sources stage drafts with the model (minutes at worst); a
# model that is down is retried with durable backoff, the stage kept in the checkpoint.
drafting = functools.partial(On, timeout_s=300, max_attempts=8, backoff_base_s=0.5, backoff_cap_s=30)

SPEC: ServiceSpec[ReportState, Deps] = ServiceSpec(
    name=SERVICE,
    version=__version__,
    handlers=[
        On(ReportRequested, on_report_requested, timeout_s=30),
        drafting(SourceFetched, on_source_fetched),
        drafting(SourceFetchFailed, on_source_fetch_failed),
        drafting(StageDeadlineReached, on_stage_deadline_reached),
        drafting(ApprovalDecided, on_approval_decided),
        WORKFLOW_END,
    ],
    produces=frozenset(
        {
            "source.fetch_requested",
            "stage.deadline_reached",
            "report.drafted",
            "report.delivered",
            "approval.requested",
            "workflow.ended",
        }
    ),
    state=ReportState,
    bootstrap=bootstrap,
)
