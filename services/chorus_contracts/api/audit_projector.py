"""The audit projector's read API: workflows, their timelines and approvals, as the
projection shows them (the gateway answers its users from these; the CLI reads them).

Personal data arrives opened for the reader (``context``, ``result``, a timeline entry's
``payload``), or as a placeholder string where its key is gone: those fields are typed
loosely on purpose.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from chorus_contracts.api.base import ApiModel

CURSOR_PATTERN = r"^(newest|quietest)~[0-9]{1,16}~[!-~]{1,200}$"
"""A page's position as ``next_cursor`` hands it out, not an opaque token: the order, the
sort time in microseconds since the epoch, and the last workflow id listed. Every value of
this form is a position to continue from, so a client cannot hand in one the API refuses."""


# Why a workflow needs an operator: the dead letter it waits behind, since when. (No class
# docstring: the gateway's OpenAPI document shows this model as it always has.)
class Attention(ApiModel):
    since: datetime
    why: str
    dead_letter_event_id: str
    alerted_at: datetime | None
    """When workflow.attention_needed was raised for this dead letter (None: not yet)."""


class WorkflowSummary(ApiModel):
    """One line of ``GET /v1/workflows`` (no personal data: the workflow's page has it)."""

    workflow_id: str
    workflow_type: str
    status: str
    stage: str | None
    waiting_for: str | None
    waiting_until: datetime | None
    outcome: str | None
    started_at: datetime
    ended_at: datetime | None
    duration_s: float | None
    last_event_at: datetime
    events: int
    attempts: int
    business_key: str | None = Field(description="the submitter's Idempotency-Key")
    pending_approval_id: str | None
    pending_tier: str | None
    pending_level: int | None
    attention: Attention | None = Field(default=None, description="why it is parked, since when")


class WorkflowList(ApiModel):
    """``GET /v1/workflows``: a page of workflows matching every filter, in the order asked."""

    workflows: list[WorkflowSummary]
    next_cursor: str | None = Field(description="pass as cursor for the next page; null on the last")


class PendingApproval(ApiModel):
    """The approval a workflow waits on, as its status shows it."""

    approval_id: str
    tier: str
    level: int
    waiting_until: datetime | None
    context: dict[str, Any] | str | None


class StatusView(ApiModel):
    """A workflow's status, stage, what it waits for, its outcome, times and counts: the
    columns of its projection row, which the read API answers with (and the workflow id)."""

    workflow_type: str
    status: str
    """running, waiting, attention, or the outcome: completed, rejected, failed,
    compensated, timed_out, cancelled, erased."""
    stage: str | None
    waiting_for: str | None
    waiting_until: datetime | None
    attempts: int
    outcome: str | None
    outcome_reason: str | None
    result: dict[str, Any] | None
    started_at: datetime
    ended_at: datetime | None
    duration_s: float | None
    last_event_at: datetime
    events: int
    subject_ref: str | None
    pending_approval: PendingApproval | None
    submitter_ref: str | None = None
    business_key: str | None = None


class WorkflowStatusView(StatusView):
    """``GET /v1/workflows/{id}`` (without the timeline): the status columns and the
    workflow's id, and why it needs attention when it does."""

    workflow_id: str
    attention: Attention | None = None


class TimelineEntry(ApiModel):
    event_id: str
    origin: str
    """topic, or janitor / erasure for rows the projector wrote itself."""
    event_type: str
    schema_version: int
    producer: str
    producer_version: str | None
    """The producer's release (None on rows the projector wrote itself, or recorded before
    it kept the version)."""
    occurred_at: datetime
    recorded_at: datetime
    trace_id: str | None
    causation_id: str | None
    decision: str | None
    actor: str | None
    external_call: str | None
    payload: dict[str, Any]


class Timeline(ApiModel):
    """``GET /v1/workflows/{id}/timeline``: its events in the order they happened."""

    workflow_id: str
    timeline: list[TimelineEntry]


class ApprovalTask(ApiModel):
    """One line of ``GET /v1/approvals?tier=<tier>``."""

    workflow_id: str
    workflow_type: str
    approval_id: str
    tier: str
    level: int
    waiting_until: datetime | None
    context: dict[str, Any] | str | None
    stage: str | None
    requested_at: datetime | None = None
    """When the approval was asked for (its age)."""


class ApprovalTasks(ApiModel):
    """``GET /v1/approvals``: open approvals (of ``tier``, when given), soonest deadline first."""

    tier: str | None
    approvals: list[ApprovalTask]


class ApprovalState(ApiModel):
    """One approval gate as a reviewer's client sees it."""

    approval_id: str
    status: str
    """pending (someone may decide now), decided, or closed (the workflow ended first)."""
    tier: str | None
    level: int
    waiting_until: datetime | None
    context: dict[str, Any] | str | None
    decision: str | None
    decided_at: datetime | None
    closed_reason: str | None = None
    """Why a closed approval was withdrawn from reviewers (the workflow's end)."""
    requested_at: datetime | None = None


class ApprovalView(ApprovalState):
    """``GET /v1/approvals/{id}``: one approval gate, whatever its state (what a decision is
    checked against), and its workflow."""

    workflow_id: str
    workflow_type: str
