"""Outcome analytics' API: counts and durations per workflow type and hour, and per
release of a service (a canary beside its stable release). Nothing about one workflow."""

from __future__ import annotations

from datetime import datetime

from chorus.contracts.api.base import ApiModel


class Durations(ApiModel):
    """How long workflows took, in seconds; the percentiles are None without any."""

    count: int
    p50: float | None
    p90: float | None
    p99: float | None


class Cost(ApiModel):
    """What the language models of the workflows that completed in the hour spent
    (workflow.spend_recorded), in dollars."""

    completed_usd: float
    per_completed_usd: float | None
    """None when none completed."""


class OutcomeBucket(ApiModel):
    """One workflow type in one hour (UTC)."""

    workflow_type: str
    hour: datetime
    started: int
    ended: dict[str, int]
    """Per outcome (completed, rejected, failed, ...): every outcome, zero included."""
    escalated: int
    dead_lettered: dict[str, int]
    """Per error category: every category, zero included."""
    duration_s: Durations
    cost: Cost = Cost(completed_usd=0.0, per_completed_usd=None)


class ReleaseOutcomes(ApiModel):
    """The workflows pinned to one release of a service, of one workflow type."""

    service: str
    release: str
    workflow_type: str
    started: int
    ended: dict[str, int]
    completion_rate: float | None
    escalated: int
    dead_lettered: dict[str, int]
    duration_s: Durations


class Outcomes(ApiModel):
    """``GET /analytics/outcomes``: buckets, oldest hour first."""

    buckets: list[OutcomeBucket]


class Releases(ApiModel):
    """``GET /analytics/releases``."""

    releases: list[ReleaseOutcomes]
