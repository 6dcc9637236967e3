"""The gateway's declaration: an HTTP API beside handlers for webhooks and deadlines."""

from __future__ import annotations

from chorus import __version__
from chorus.contracts.lifecycle import (
    ScheduleDue,
    WorkflowCancelRequested,
    WorkflowDeadlineReached,
    WorkflowEnded,
    WorkflowStarted,
)
from chorus.kernel.service import On, ServiceSpec
from chorus.platform.gateway.adapters.repository import SubmissionRetention, migrate
from chorus.platform.gateway.adapters.webhooks import WebhookSender
from chorus.platform.gateway.bootstrap import bootstrap
from chorus.platform.gateway.bulk import run_bulk_actions
from chorus.platform.gateway.domain import GatewayState
from chorus.platform.gateway.handlers import (
    on_schedule_due,
    on_workflow_cancel_requested,
    on_workflow_deadline_reached,
    on_workflow_ended,
    on_workflow_started,
)
from chorus.platform.gateway.scheduled import run_schedules
from chorus.platform.gateway.server import serve_api

SPEC: ServiceSpec[GatewayState, WebhookSender] = ServiceSpec(
    name="gateway",
    version=__version__,
    handlers=[
        On(WorkflowStarted, on_workflow_started, timeout_s=30),
        # A callback receiver that is down gets retried for about an hour of backoff. The
        # submitter is told the end's reason in clear (personal: opened for this handler).
        On(
            WorkflowEnded,
            on_workflow_ended,
            personal=True,
            timeout_s=60,
            max_attempts=10,
            backoff_base_s=2.0,
            backoff_cap_s=600,
        ),
        On(WorkflowDeadlineReached, on_workflow_deadline_reached, timeout_s=30),
        # Says who cancelled and why in the end's (sealed) reason.
        On(WorkflowCancelRequested, on_workflow_cancel_requested, timeout_s=30, personal=True),
        # A schedule's timer: its due runs recorded (the schedule worker starts them).
        On(ScheduleDue, on_schedule_due, timeout_s=30),
    ],
    # The API (not a handler) emits the start events and decisions through the same outbox.
    produces=frozenset(
        {
            "workflow.started",
            "workflow.ended",
            "workflow.deadline_reached",
            "workflow.cancel_requested",
            "invoice.received",
            "report.requested",
            "approval.decision_submitted",
            # The reference workflows' signals (workflows.yaml), sent for people who may.
            "invoice.line_added",
            "schedule.due",
            "workflow.reset_requested",
            # A bulk action's requests to the dead-letter and rollout services.
            "workflow.redrive_requested",
            "workflow.repin_ordered",
        }
    ),
    state=GatewayState,
    migrations=[migrate],
    owned_data=[SubmissionRetention()],
    # The API, and what it was asked for that goes on in the background: bulk actions and
    # schedules' runs.
    workers=[serve_api, run_bulk_actions, run_schedules],
    bootstrap=bootstrap,
)
