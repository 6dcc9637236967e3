"""Versioned rollouts: which release of a service takes which new workflows.

The latest ``rollout.changed`` of a service (on the compacted topic ``chorus.rollouts``,
keyed by service) is its policy; every process follows that topic. A workflow is pinned to
a release when it starts (``Envelope.pins``) and stays there whatever the policy says later.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from chorus.contracts.base import EventModel, Model, Name, Text, UtcDateTime, event
from chorus.contracts.envelope import Release
from chorus.contracts.platform import BULK_ID_PATTERN

RolloutStatus = Literal["canary", "promoted", "rolled_back"]
"""``canary``: a share of new workflows goes to the canary release; ``promoted``: every new
one goes to the release that was the canary (the old one drains); ``rolled_back``: every
new one goes back to the stable release."""
RolloutAction = Literal["start", "set", "promote", "rollback", "auto_rollback"]
MAX_TYPES = 100


class AutoRollback(Model):
    """Roll back by itself when the canary does worse than stable, over enough workflows."""

    failure_margin: float = Field(
        ge=0,
        le=1,
        description="roll back when the canary's share of workflows with a persistent or semantic "
        "failure exceeds stable's by more than this (0.1 = ten percentage points)",
    )
    dead_letter_margin: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="the same for the share of workflows with a dead letter",
    )
    min_workflows: int = Field(
        default=20, ge=1, le=1_000_000, description="judged only once the canary took this many workflows"
    )


@event("rollout.changed", 1)
class RolloutChanged(EventModel):
    """The rollout policy of one service as it stands after a change (who changed it, why)."""

    service: Name
    revision: int = Field(ge=1, le=1_000_000_000, description="1 for the first policy, +1 per change")
    stable: Release = Field(description="the release that takes workflows not sent to the canary")
    canary: Release | None = Field(default=None, description="the release on trial, if any")
    percent: float = Field(default=0, ge=0, le=100, description="share of new workflows for the canary")
    workflow_types: Annotated[list[Name], Field(max_length=MAX_TYPES)] = Field(
        default_factory=list, description="workflow types the canary may take; empty: every type"
    )
    status: RolloutStatus
    action: RolloutAction
    reason: Text | None = None
    changed_by: Name = Field(description="the operator's principal, or rollout_service for the rule")
    auto_rollback: AutoRollback | None = None


@event("release.reported", 1)
class ReleaseReported(EventModel):
    """What one running release of a service did in the last window (every replica reports
    its own): that it runs, how many steps it took and how long they took."""

    service: Name
    release: Release
    consumer_group: Name
    instance: Name = Field(description="the reporting replica")
    window_start: UtcDateTime
    window_end: UtcDateTime
    steps: int = Field(ge=0, le=1_000_000_000, description="events handled (not_mine ones excluded)")
    not_mine: int = Field(default=0, ge=0, le=1_000_000_000)
    p50_ms: float | None = Field(default=None, ge=0, description="step latency: read to committed")
    p99_ms: float | None = Field(default=None, ge=0)


RepinOutcome = Literal["repinned", "unchanged", "refused"]


@event("workflow.repin_requested", 1)
class RepinRequested(EventModel):
    """An operator moves one in-flight workflow of a service to another release (a canary
    being removed before its workflows end). Addressed to the service's runtime: the release
    that owns the workflow hands it over, or refuses and says why (``workflow.repin_answered``)."""

    service: Name
    to_release: Release
    from_release: Release | None = Field(
        default=None,
        description="the release the workflow was pinned to when it started, as the rollout "
        "service recorded it: the owner while the service holds no checkpoint of it yet",
    )
    requested_by: Name = Field(description="the operator's principal")
    reason: Text


@event("workflow.repin_ordered", 1)
class RepinOrdered(EventModel):
    """An operator asks, through the gateway (a bulk action by query), that the workflow move
    to another release of a service: the rollout service checks it as it checks its own
    API's request, and states ``workflow.repin_requested`` to the service's runtimes, or
    records why not."""

    service: Name
    to_release: Release
    requested_by: Name = Field(description="the operator's principal")
    reason: Text = Field(min_length=1)
    bulk_id: str | None = Field(default=None, pattern=BULK_ID_PATTERN, description="the bulk action asking")


@event("workflow.repin_answered", 1)
class RepinAnswered(EventModel):
    """The owning release's answer to a re-pin request (the request's event id names it)."""

    service: Name
    request_id: Name = Field(description="the event id of the workflow.repin_requested")
    from_release: Release = Field(description="the release that owned the workflow and answered")
    to_release: Release
    outcome: RepinOutcome
    reason: Text | None = Field(default=None, description="why it was refused")
