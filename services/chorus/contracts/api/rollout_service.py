"""The rollout service's API: each service's rollout policy (the latest ``rollout.changed``),
its releases side by side, its history, and the moves of in-flight workflows."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from chorus.contracts.api.base import ApiModel, IsoDateTime
from chorus.contracts.base import Comment, Name
from chorus.contracts.envelope import Release
from chorus.contracts.rollouts import MAX_TYPES, AutoRollback, RolloutChanged

# Strict, as a submission's body is: pydantic's lax mode would read a percent of true as 1 %
# and of "5" as 5 % (no body here has a datetime, which strict would refuse as a string).
_BODY = ConfigDict(frozen=True, extra="forbid", strict=True)

# -- requests (no docstrings: the OpenAPI document shows them as it always has) ----------------


class StartBody(ApiModel):
    model_config = _BODY

    canary: Release = Field(description="the release to try (its CHORUS_RELEASE)")
    percent: float = Field(ge=0, le=100, description="share of new workflows it takes")
    stable: Release | None = Field(
        default=None, description="the release serving today; default: the last rollout's stable, or main"
    )
    workflow_types: list[Name] = Field(default_factory=list, max_length=MAX_TYPES)
    auto_rollback: AutoRollback | None = None
    reason: Comment | None = None


class SetBody(ApiModel):
    model_config = _BODY

    percent: float = Field(ge=0, le=100)
    reason: Comment | None = None


class RepinBody(ApiModel):
    model_config = _BODY

    to: Release = Field(description="the release to move the workflow to: the rollout's stable or canary")
    reason: Comment = Field(min_length=1, description="why, for the audit of moves")


class ReasonBody(ApiModel):
    model_config = _BODY

    reason: Comment | None = None


# -- answers ----------------------------------------------------------------------------------


class PolicyChanged(ApiModel):
    """A change's answer: the policy now in force."""

    policy: RolloutChanged


class Rollouts(ApiModel):
    """``GET /v1/rollouts``: every service's policy."""

    rollouts: list[RolloutChanged]


class ReleaseState(ApiModel):
    """One release of a service, side by side with the others."""

    release: str
    role: str
    """stable, canary, draining (workflows pinned to it still run) or idle (safe to remove)."""
    running: bool
    replicas: int
    workflows: int
    in_flight: int
    ended: int
    completed: int
    completion_rate: float | None
    failed: int
    failure_rate: float | None
    dead_lettered: int
    failures_by_category: dict[str, int]
    steps: int
    p50_ms: float | None
    p99_ms: float | None


class PolicyChange(ApiModel):
    """One change of a service's policy (its history)."""

    revision: int
    action: str
    actor: str
    reason: str | None
    at: IsoDateTime
    policy: dict[str, Any]


class Repin(ApiModel):
    """A move of an in-flight workflow to another release, and the owning release's answer."""

    request_id: str
    workflow_id: str
    from_release: str | None
    to_release: str
    requested_by: str
    reason: str
    requested_at: IsoDateTime
    outcome: str
    """pending, moved or refused."""
    answered_by: str | None
    refusal: str | None
    answered_at: IsoDateTime | None


class RolloutState(ApiModel):
    """``GET /v1/rollouts/{service}``: its policy, its releases, its history and moves."""

    service: str
    policy: RolloutChanged | None
    releases: list[ReleaseState]
    history: list[PolicyChange]
    repins: list[Repin]


class InFlight(ApiModel):
    """``GET /v1/rollouts/{service}/workflows?release=``: the workflows pinned to a release
    that have not ended, oldest first."""

    service: str
    release: str
    count: int
    workflows: list[str]


class RepinAsked(ApiModel):
    """202 to a repin: asked; follow ``location`` for the answer."""

    request_id: str
    status: str
    location: str


class Repins(ApiModel):
    """``GET /v1/rollouts/{service}/repins``: the moves asked for, newest first."""

    service: str
    repins: list[Repin]
