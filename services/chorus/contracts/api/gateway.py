"""The gateway's public API: what a client (the console, the CLI, a submitter's system)
sends and gets back. Its reads are the audit projector's answers
(:mod:`chorus.contracts.api.audit_projector`), each with what the gateway adds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import ConfigDict, Discriminator, Field, Tag, create_model

from chorus.contracts.api.audit_projector import (
    ApprovalTask,
    ApprovalView,
    TimelineEntry,
    WorkflowList,
    WorkflowStatusView,
)
from chorus.contracts.api.base import ApiModel, IsoDateTime
from chorus.contracts.base import Comment, EventModel, InClear, Model, Ref, Url, plain_input
from chorus.contracts.envelope import EVENT_TYPE_PATTERN, Priority, Release
from chorus.contracts.lifecycle import SIGNAL_FIELDS

StartT = TypeVar("StartT", bound=EventModel)

# -- requests ---------------------------------------------------------------------------------


class Submission(ApiModel, Generic[StartT]):
    """The body of POST /v1/workflows/{workflow_type}: ``input`` is the start event's payload."""

    # Strict, as the input's event model is: JSON's true is no deadline, "60" no number.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    input: StartT = Field(description="the payload of the workflow type's start event")
    callback_url: Url | None = Field(default=None, description="POSTed the result, HMAC-signed, when it ends")
    priority: Priority = "normal"
    subject_ref: Ref | None = Field(default=None, description="reference to the data subject (for erasure)")
    deadline_s: float | None = Field(default=None, gt=0, description="bounded per type (see the API)")


class DecisionBody(ApiModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Literal["approve", "reject", "revise"]
    comment: InClear[Comment] = ""


class CancelBody(ApiModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: InClear[Comment] = Field(min_length=1, description="why, for the audit trail and the submitter")


class ResetBody(ApiModel):
    """``POST /v1/workflows/{id}/reset``: the event (from its timeline) the workflow goes
    back to, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str = Field(
        pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        description="one of the workflow's events (GET /v1/workflows/{id}: its timeline): every "
        "service goes back to what it was before handling it, and handles it again",
    )
    reason: InClear[Comment] = Field(min_length=1, description="why, for the audit trail")
    input: dict[str, Any] | None = Field(
        default=None,
        description="edit-and-reset: the event corrected (its payload, checked against its schema), "
        "handled instead of it; only the workflow's start event (the submission's input)",
    )


InputT = TypeVar("InputT", bound=Model)


class SignalInput(Model):
    """A signal's input as a caller sends it: its event's fields beside those the gateway
    fills in (signal_id, sent_by, reason)."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid")


def signal_input(event_model: type[EventModel]) -> type[SignalInput]:
    """The input of the signal ``event_model`` states (personal fields in clear only)."""
    plain = plain_input(event_model)
    fields: dict[str, Any] = {
        name: (info.annotation, info)
        for name, info in plain.model_fields.items()
        if name not in SIGNAL_FIELDS
    }
    found: type[SignalInput] = create_model(f"{event_model.__name__}Input", __base__=SignalInput, **fields)
    return found


class SignalBody(ApiModel, Generic[InputT]):
    """The body of ``POST /v1/workflows/{id}/signals/{name}`` (and ``/updates/{name}``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    input: InputT = Field(description="its event's fields beside signal_id, sent_by and reason")
    reason: InClear[Comment] = Field(min_length=1, description="why, for the workflow's audit trail")


SCHEDULE_ID_PATTERN = r"^sch-[0-9a-f]{32}$"
Overlap = Literal["skip", "buffer_one", "allow"]


class ScheduleBody(ApiModel):
    """``POST /v1/schedules``: start a workflow type with one input, on a cron expression or
    every so many seconds (UTC), as the caller's submissions."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    workflow_type: Annotated[str, Field(min_length=1, max_length=63)]
    input: dict[str, Any] = Field(
        description="the start event's payload (as POST /v1/workflows/{type} takes)"
    )
    cron: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="five fields, UTC: minute hour day-of-month month day-of-week"
    )
    every_s: float | None = Field(default=None, ge=1, le=366 * 86400, description="or: every so many seconds")
    overlap: Overlap = Field(
        default="skip",
        description="a run due while the previous one's workflow still runs: skip it, buffer one "
        "(started when the previous ends), or allow it",
    )
    catchup_window_s: float = Field(
        default=3600,
        ge=0,
        le=366 * 86400,
        description="after an outage, runs due at most this long ago are started; older ones are missed",
    )
    priority: Priority = "normal"
    deadline_s: float | None = Field(default=None, gt=0, description="each run's deadline (bounded per type)")
    subject_ref: Ref | None = Field(default=None, description="the data subject each run concerns (erasure)")
    note: InClear[Comment] = ""


class ScheduleRun(ApiModel):
    due_at: IsoDateTime
    kind: str = Field(description="scheduled, catch_up (due while its timer could not fire), manual")
    status: str = Field(description="due, buffered, started, skipped (with why), missed")
    workflow_id: str | None
    detail: str | None
    at: IsoDateTime | None = Field(description="when it was started, skipped or missed")


class ScheduleChange(ApiModel):
    at: IsoDateTime
    by: str
    action: Literal["create", "pause", "resume", "trigger", "delete"]


class Schedule(ApiModel):
    """A schedule, its next run, its latest runs and who changed it when (newest first)."""

    schedule_id: str
    workflow_type: str
    cron: str | None
    every_s: float | None
    overlap: Overlap
    catchup_window_s: float
    priority: Priority
    note: str
    created_by: str
    created_at: IsoDateTime
    state: Literal["active", "paused", "deleted"]
    next_due_at: IsoDateTime | None
    runs: list[ScheduleRun] = Field(description="the latest 20")
    changes: list[ScheduleChange] = Field(description="the latest 20: who created, paused, resumed, ...")
    status_url: str


class ScheduleList(ApiModel):
    schedules: list[Schedule]


BulkActionName = Literal["cancel", "signal", "reset", "redrive", "repin"]
BULK_TARGETS: dict[str, tuple[str, ...]] = {
    "cancel": (),
    "signal": ("signal", "input"),
    "reset": ("reset_to",),
    "redrive": (),
    "repin": ("service", "to_release"),
}
"""What each bulk action names besides its query and reason (and nothing else)."""


class BulkActionBody(ApiModel):
    """``POST /v1/bulk-actions``: what to do to every running workflow a query finds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: BulkActionName = Field(
        description="what is done to each workflow found: ``cancel`` it; send it a ``signal`` (one "
        "an operator may send, with ``signal`` and ``input``); ``reset`` it to its latest event of "
        "type ``reset_to`` (as POST /v1/workflows/{id}/reset would); ``redrive`` the dead letters it "
        "waits on (the dead-letter service, as the operator); ``repin`` it at ``service`` to the "
        "release ``to_release`` (the rollout service checks and asks, as the operator)"
    )
    signal: Annotated[str, Field(max_length=40)] | None = Field(default=None, description="the signal's name")
    input: dict[str, Any] | None = Field(default=None, description="the signal's input (each one gets it)")
    reset_to: Annotated[str, Field(max_length=80, pattern=EVENT_TYPE_PATTERN)] | None = Field(
        default=None, description="reset: the event type each workflow goes back to (its latest one)"
    )
    service: Annotated[str, Field(max_length=80, pattern=r"^[a-z][a-z0-9_]*$")] | None = Field(
        default=None, description="repin: the service whose release each workflow moves to"
    )
    to_release: Release | None = Field(
        default=None, description="repin: the release of ``service`` each workflow moves to"
    )
    query: Annotated[str, Field(min_length=1, max_length=1000)] = Field(
        description="which workflows (GET /v1/workflows?query=): only running, waiting and attention "
        "ones are acted on"
    )
    reason: InClear[Comment] = Field(min_length=1, description="why, for each workflow's audit trail")
    dry_run: bool = Field(default=False, description="count what it would act on; act on nothing")
    rate_per_s: float = Field(default=10.0, gt=0, le=100, description="at most this many workflows a second")


# -- answers ----------------------------------------------------------------------------------


class SubmissionAccepted(ApiModel):
    """202 to a submission (and to its retry with the same Idempotency-Key)."""

    workflow_id: str
    status_url: str
    status: Literal["accepted"] = "accepted"


class WorkflowPage(WorkflowList):
    next: str | None = Field(description="the next page's URL; null on the last")


class SearchAttributes(ApiModel):
    """``GET /v1/search-attributes``: what ``GET /v1/workflows?query=`` compares."""

    builtin: dict[str, Literal["keyword", "number"]] = Field(description="what every workflow has")
    workflow_types: dict[str, dict[str, Literal["keyword", "number"]]] = Field(
        description="workflow type -> its declared attributes (workflows.yaml) -> keyword or number"
    )


class WorkflowDetail(WorkflowStatusView):
    """``GET /v1/workflows/{id}`` once the projection knows the workflow: its status and
    its timeline."""

    timeline: list[TimelineEntry]


class AcceptedWorkflow(ApiModel):
    """``GET /v1/workflows/{id}`` while only the gateway knows it (just accepted)."""

    workflow_id: str
    workflow_type: str
    status: Literal["accepted"] = "accepted"
    accepted_at: IsoDateTime
    timeline: list[TimelineEntry] = []


def _accepted_or_projected(value: Any) -> str:
    status = value.get("status") if isinstance(value, dict) else getattr(value, "status", None)
    return "accepted" if status == "accepted" else "projected"


WorkflowState = Annotated[
    Annotated[AcceptedWorkflow, Tag("accepted")] | Annotated[WorkflowDetail, Tag("projected")],
    Discriminator(_accepted_or_projected),
]
"""What ``GET /v1/workflows/{id}`` answers: its status says which form."""


class WorkflowResult(ApiModel):
    """``GET /v1/workflows/{id}/result`` of an ended workflow."""

    workflow_id: str
    outcome: str | None
    result: dict[str, Any] | None
    ended_at: datetime | None


class CancelAccepted(ApiModel):
    """``POST /v1/workflows/{id}/cancel``: 202 cancelling, or 200 cancelled already."""

    workflow_id: str
    status: Literal["cancelling", "cancelled"]
    requested_by: str
    reason: str
    requested_at: IsoDateTime
    status_url: str


class ResetAccepted(ApiModel):
    """``POST /v1/workflows/{id}/reset``: 202, the reset is on its way to every service
    (the timeline shows each one's ``workflow.reset_applied``)."""

    reset_id: str
    workflow_id: str
    point_event_id: str
    point_event_type: str
    replacement_event_id: str | None = Field(
        default=None, description="edit-and-reset: the corrected event's id, handled instead of the point"
    )
    undone: list[str] = Field(description="the types of the events after the point, undone, in order")
    compensated: list[str] = Field(
        description="those of them a service gives back (workflows.yaml: reset.compensated)"
    )
    requested_by: str
    reason: str
    requested_at: IsoDateTime
    status_url: str


class SignalAnswerView(ApiModel):
    """What the handling service answered: whether the workflow took the signal, what it
    did, and its whole answer event (``payload``)."""

    accepted: bool
    detail: str
    event_type: str
    answered_at: IsoDateTime
    payload: dict[str, Any]


class SignalSent(ApiModel):
    """A signal or update: 202 sent (an update not answered within its timeout too), or 200
    answered (an update). ``GET status_url`` says how far it got."""

    signal_id: str
    workflow_id: str
    name: str
    update: bool = Field(description="sent as an update: its caller waited for the answer")
    status: Literal["sent", "answered"]
    sent_by: str
    sent_at: IsoDateTime
    answer: SignalAnswerView | None
    status_url: str


class OfferedSignal(ApiModel):
    name: str
    event_type: str
    roles: list[str]
    update: bool = Field(description="it has an answer: it may be sent as an update")
    timeout_s: float | None = Field(description="how long an update waits for its answer")
    description: str
    input_schema: dict[str, Any] = Field(description="the JSON Schema of its input")


class WorkflowSignals(ApiModel):
    """``GET /v1/workflows/{id}/signals``: what the caller may send this workflow."""

    workflow_id: str
    workflow_type: str
    signals: list[OfferedSignal]


class BulkItem(ApiModel):
    workflow_id: str
    status: Literal["pending", "done", "skipped"]
    detail: str | None = Field(
        description="why it was skipped (it ended, was cancelled already, takes no such signal), "
        "or the signal sent"
    )
    at: IsoDateTime | None = Field(description="when it was acted on")


class BulkAction(ApiModel):
    """A bulk action: what it does, to which workflows (found when it was asked for, then
    fixed), and how far it got. ``dry_run``: what it would act on, nothing done."""

    bulk_id: str | None = Field(description="null for a dry run")
    action: BulkActionName
    signal: str | None = None
    reset_to: str | None = None
    service: str | None = None
    to_release: str | None = None
    query: str
    reason: str
    requested_by: str
    requested_at: IsoDateTime
    rate_per_s: float
    matched: int = Field(description="the running workflows the query found when it was asked for")
    pending: int
    done: int
    skipped: int
    finished_at: IsoDateTime | None
    items: list[BulkItem] = Field(description="up to 100 of its workflows (a dry run: the first found)")
    status_url: str | None = None


class BulkActions(ApiModel):
    """``GET /v1/bulk-actions``: the latest, newest first (each without its items)."""

    bulk_actions: list[BulkAction]


class Me(ApiModel):
    """``GET /v1/me``: who a key is."""

    principal: str
    role: str
    tier: str | None


class ApprovalQueue(ApiModel):
    """``GET /v1/approvals``: the approvals waiting on a tier (the caller's, or any for an
    operator)."""

    assignee: str
    tier: str | None
    approvals: list[ApprovalTask]


class SubmittedDecision(ApiModel):
    """A reviewer's decision as the gateway took it."""

    level: int
    reviewer: str
    decision: str
    comment: str
    decided_at: IsoDateTime


class ApprovalDetail(ApprovalView):
    """``GET /v1/approvals/{id}``: the approval, who decided it and what reviewers submitted."""

    decided_by: str | None
    submitted_decisions: list[SubmittedDecision]


class DecisionAccepted(ApiModel):
    """202 to ``POST /v1/approvals/{id}``: the decision is on its way to the approval gate."""

    approval_id: str
    decision: str
    status: Literal["submitted"] = "submitted"
    workflow_id: str
