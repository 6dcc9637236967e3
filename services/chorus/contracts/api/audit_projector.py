"""The audit projector's read API: workflows, their timelines and approvals, as the
projection shows them (the gateway answers its users from these; the CLI reads them).

Personal data arrives opened for the reader (``context``, ``result``, a timeline entry's
``payload``), or as a placeholder string where its key is gone: those fields are typed
loosely on purpose.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, ConfigDict, Field, Strict, StrictBool

from chorus.contracts.api.base import ApiModel, IsoDateTime

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
    attributes: dict[str, str | int | float] = Field(
        default_factory=dict, description="its search attributes (workflows.yaml), as last stated"
    )


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


class Spend(ApiModel):
    """What the workflow's language models used, summed over its steps' records
    (workflow.spend_recorded)."""

    model_turns: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cost_micro_usd: int = Field(description="millionths of a dollar (exact)")
    cost_usd: float
    models: list[str] = Field(description="the models that answered")


class Streaming(ApiModel):
    """What a model is writing in a step that still runs (agent.output_streamed, the latest):
    shown until anything else happens to the workflow."""

    service: str
    step: str
    turn: int
    model: str
    chars: int = Field(description="how much it has written in this turn so far")
    text: str = Field(description="what it has written so far (its last 6,000 characters)")
    at: datetime


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
    attributes: dict[str, str | int | float] = Field(
        default_factory=dict, description="its search attributes (workflows.yaml), as last stated"
    )
    spend: Spend | None = Field(default=None, description="what its language models used (None: nothing)")
    streaming: Streaming | None = Field(
        default=None, description="what a model is writing in a step still running (None: nothing)"
    )


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
    undone_by: str | None = None
    """The reset that undid it (it stays in the timeline; the status no longer counts it)."""


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


# -- erasure, the access log, replays ----------------------------------------------------------


# POST /v1/erasures: erase a data subject everywhere Chorus keeps it. (Request models carry
# no docstring: the OpenAPI documents show them as they always have.)
class ErasureRequest(ApiModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    subject_ref: str = Field(min_length=1, max_length=1024)


class Confirmation(ApiModel):
    """What one service removed for an erasure (every part of it, when asked in parts)."""

    workflows: int
    rows: dict[str, int]
    confirmed_at: IsoDateTime
    parts: int


class ErasureRecord(ApiModel):
    erasure_id: str
    subject_hash: str
    actor: str
    erased_at: IsoDateTime
    rows: dict[str, int]
    """``schema.table`` -> projection rows redacted or deleted."""
    parts: int
    confirmations: dict[str, Confirmation]


class Erasure(ErasureRecord):
    """``GET /v1/erasures/{id}``: the erasure and which services have not confirmed yet."""

    pending: list[str]
    complete: bool


class ErasureStarted(ErasureRecord):
    """202 to ``POST /v1/erasures``: the erasure recorded, and its workflows in the projection."""

    workflows: int
    pending: list[str]
    complete: bool


class AccessRead(ApiModel):
    """One read of a subject's personal data: who, for whom, which workflow and fields."""

    at: IsoDateTime
    principal: str
    on_behalf_of: str | None
    workflow_id: str
    fields: list[str]
    route: str


class AccessLog(ApiModel):
    """``GET /v1/access``: the reads of a subject's personal data, newest first."""

    subject_hash: str
    accesses: list[AccessRead]


# POST /v1/replays: rebuild the projection from the topics into a fresh schema.
class ReplayRequest(ApiModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    since: AwareDatetime | None = Field(
        default=None, description="from the first record at or after this time; else from the start"
    )
    verify: StrictBool = False
    drop: StrictBool = False
    live_timeout_s: Annotated[float, Strict()] = Field(default=30.0, ge=0, le=3600)


class ReplayProgress(ApiModel):
    done: int
    total: int | None


class ReplayResult(ApiModel):
    records: int
    applied: int
    undecodable: int
    seconds: float
    topics: list[str]
    group: str


class ReplayComparison(ApiModel):
    """The replayed projection against the live one, row for row."""

    equal: bool
    workflows: int
    live_checksum: str
    replay_checksum: str
    differing: list[str]
    """The first hundred workflows that differ."""
    differing_count: int
    live_lag: int


class ReplayJob(ApiModel):
    """``/v1/replays/{id}``: a replay's state (running, succeeded, failed) and what it did.
    (Its ``schema`` is ``schema_name`` here: dump it ``by_alias``.)"""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    replay_id: str
    schema_name: str = Field(alias="schema")
    since: IsoDateTime | None
    verify: bool
    drop: bool
    state: Literal["running", "succeeded", "failed"]
    progress: ReplayProgress
    result: ReplayResult | None
    comparison: ReplayComparison | None
    error: str | None
