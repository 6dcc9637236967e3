"""The rollout service's declaration: what it learns from, its tables, its rule and API."""

from __future__ import annotations

from typing import Any

from chorus import __version__
from chorus.contracts.lifecycle import WorkflowEnded, WorkflowStarted
from chorus.contracts.platform import EventDeadLettered, ReviewRequested
from chorus.contracts.rollouts import ReleaseReported, RepinAnswered, RepinOrdered
from chorus.kernel.service import On, ServiceSpec
from chorus.platform.rollout_service.adapters.repository import RolloutRetention, migrate
from chorus.platform.rollout_service.api import routes
from chorus.platform.rollout_service.bootstrap import bootstrap
from chorus.platform.rollout_service.changes import repin_ordered
from chorus.platform.rollout_service.groups import report_group_lag
from chorus.platform.rollout_service.handlers import (
    on_event_dead_lettered,
    on_release_reported,
    on_repin_answered,
    on_repin_ordered,
    on_review_requested,
    on_workflow_ended,
    on_workflow_started,
)
from chorus.platform.rollout_service.judge import judge_canaries

VERSION = __version__  # the release of Chorus it ships in

# No per-workflow state: what it learns are rows of its own tables, written as effects.
SPEC: ServiceSpec[Any, None] = ServiceSpec(
    name="rollout_service",
    version=VERSION,
    handlers=[
        On(WorkflowStarted, on_workflow_started, timeout_s=30),
        On(WorkflowEnded, on_workflow_ended, timeout_s=30),
        On(EventDeadLettered, on_event_dead_lettered, timeout_s=30),
        On(ReviewRequested, on_review_requested, timeout_s=30),
        On(ReleaseReported, on_release_reported, timeout_s=30),
        On(RepinAnswered, on_repin_answered, timeout_s=30),
        On(RepinOrdered, on_repin_ordered, timeout_s=30),
    ],
    # Handlers emit nothing; the API and the rule publish policies (and the API and the
    # repin worker an operator's requests to move a workflow) through the outbox.
    produces=frozenset({"rollout.changed", "workflow.repin_requested"}),
    migrations=[migrate],
    owned_data=[RolloutRetention()],
    bootstrap=bootstrap,
    workers=[judge_canaries, report_group_lag, repin_ordered],
    http_routes=routes,
)
