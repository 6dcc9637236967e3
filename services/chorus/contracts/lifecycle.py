"""Events every workflow has, whatever its type: it started, it ended, its deadline came."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import Field

from chorus.contracts.base import (
    EventModel,
    KeyedRef,
    LongText,
    Model,
    Name,
    Personal,
    Text,
    Url,
    UtcDateTime,
    Uuid,
    event,
    upcaster,
)
from chorus.contracts.platform import OriginalRecord

OutcomeV1 = Literal["completed", "rejected", "failed", "compensated", "timed_out", "cancelled"]
Outcome = Literal["completed", "rejected", "failed", "compensated", "timed_out", "cancelled", "erased"]
"""v2 adds ``erased``: the workflow's subject was erased while it ran (its compensation runs)."""
WorkflowStatus = Literal[
    "attention",
    "waiting",
    "running",
    "completed",
    "rejected",
    "failed",
    "compensated",
    "timed_out",
    "cancelled",
    "erased",
]
"""What a workflow is doing as its projection says (the gateway's API, the CLI, the console):
running, waiting (for a person or a window), attention (parked behind a dead letter), or
the outcome it ended with."""
WORKFLOW_STATUSES: tuple[str, ...] = get_args(WorkflowStatus)


@event("workflow.started", 1)
class WorkflowStarted(EventModel):
    """The gateway accepted work; the domain's first event follows on its own topic."""

    submitted_by: Personal[Name]
    start_event_type: Name
    callback_url: Url | None = Field(default=None, description="webhook for the result")
    deadline_at: UtcDateTime | None = None
    submitter_ref: KeyedRef | None = Field(
        default=None,
        description="the submitter, keyed (HMAC-SHA256 under CHORUS_SUBJECT_KEY): what lists "
        "filter on without opening submitted_by",
    )
    business_key: Annotated[str, Field(min_length=1, max_length=255)] | None = Field(
        default=None,
        description="the submitter's Idempotency-Key: its own name for the work (an order number)",
    )


@event("workflow.ended", 1)
class WorkflowEndedV1(EventModel):
    """Terminal: nothing more happens in this workflow. ``result`` is what the submitter gets."""

    outcome: OutcomeV1
    reason: Personal[Text] = Field(default="", description="may quote a reviewer's comment")
    result: dict[str, Any] = Field(default={}, max_length=100)
    ended_by: Name


@event("workflow.ended", 2)
class WorkflowEnded(EventModel):
    """Terminal: nothing more happens in this workflow. ``result`` is what the submitter gets.
    v2: ``outcome`` may be ``erased``."""

    outcome: Outcome
    reason: Personal[Text] = Field(default="", description="may quote a reviewer's comment")
    result: dict[str, Any] = Field(default={}, max_length=100)
    ended_by: Name


@upcaster("workflow.ended", 1)
def _workflow_ended_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return payload  # every v1 outcome is a v2 outcome


@event("workflow.deadline_reached", 1)
class WorkflowDeadlineReached(EventModel):
    """The workflow-level deadline passed (fired by the timer the gateway scheduled)."""

    deadline_at: UtcDateTime


@event("workflow.cancel_requested", 1)
class WorkflowCancelRequested(EventModel):
    """Someone allowed to (the submitter, an operator) asked to stop the workflow. The gateway
    ends it as ``cancelled`` unless it has ended already; compensation follows the end."""

    requested_by: Personal[Name]
    reason: Personal[Text] = Field(min_length=1)


@event("stage.deadline_reached", 1)
class StageDeadlineReached(EventModel):
    """A stage's deadline passed (fired by the timer its fan-in service scheduled when it
    opened the stage; see chorus.outside.stages). Only ``service`` acts on it."""

    stage_id: Name
    service: Name
    deadline_at: UtcDateTime


@event("workflow.attention_needed", 1)
class WorkflowAttentionNeeded(EventModel):
    """An alert: the workflow has waited behind a dead letter longer than operators allow
    (raised once per dead letter by the audit projector, which sees every workflow). The
    workflow's deadline still ends it; an operator redrives or discards the letter."""

    since: UtcDateTime = Field(description="when the dead letter stopped it")
    waited_s: float = Field(ge=0)
    why: Text
    dead_letter_event_id: Name


@event("submitter.notified", 1)
class SubmitterNotified(EventModel):
    """The person who submitted the workflow was told: their channel took the message.
    Stated by the notifier once a delivery succeeded, never before and never for a message
    that was given up; one per message (an e-mail and a webhook are two)."""

    notice: Literal["ended", "waiting"] = Field(
        description="what they were told: how the workflow ended, or that it waits for a person"
    )
    channel: Literal["email", "webhook"]
    outcome: Outcome | None = Field(default=None, description="how it ended (notice ended)")
    approval_id: Name | None = Field(default=None, description="the approval it waits on (notice waiting)")
    delivery_id: Name = Field(description="the notifier's message (GET /v1/notifications shows its attempts)")
    attempts: int = Field(ge=1, description="the attempts it took, this one included")
    delivered_at: UtcDateTime


# -- signals: a person's input to a running workflow ---------------------------------------

SIGNAL_ID_PATTERN = r"^sig-[0-9a-f]{32}$"


class Signal(EventModel):
    """What every signal event carries beside its input: the gateway states it (and signs
    it) on the workflow's key, once it checked that the caller may send it
    (``workflows.yaml``'s ``signals``), so it is ordered with everything else that happens
    to the workflow. A signal type is an event type whose model derives from this one."""

    signal_id: str = Field(pattern=SIGNAL_ID_PATTERN, description="the gateway's id of this signal")
    sent_by: Personal[Name] = Field(description="who sent it (an API key's principal)")
    reason: Personal[Text] = Field(min_length=1, description="why, in the sender's words (the audit trail)")


SIGNAL_FIELDS = frozenset(Signal.model_fields)
"""The fields the gateway fills in: a signal's input is the rest of its event's fields."""


class SignalAnswer(EventModel):
    """What every answer to a signal carries: the handling service states whether it took
    the signal and what it did, in the same step that acted on it. A caller who sent the
    signal as an update (POST /v1/workflows/{id}/updates/{name}) gets it back."""

    signal_id: str = Field(pattern=SIGNAL_ID_PATTERN, description="the signal it answers")
    accepted: bool = Field(description="whether the workflow took it (false: nothing changed)")
    detail: Text = Field(min_length=1, description="what changed, or why nothing did")


ANSWER_FIELDS = frozenset(SignalAnswer.model_fields)


class AwaitsSignal(EventModel):
    """An event after which the workflow waits for a person's signal (``awaits``, a name of
    its type's ``signals``): while it is the workflow's latest step, the workflow shows as
    waiting for that signal."""

    awaits: ClassVar[str]


@event("schedule.due", 1)
class ScheduleDue(EventModel):
    """A schedule's timer fell due (the timer service fires what the gateway armed): the
    gateway records the runs due since the schedule's last one, starts them as its overlap
    policy says, and arms the next. Its envelope's workflow is the schedule."""

    schedule_id: str = Field(pattern=r"^sch-[0-9a-f]{32}$")
    due_at: UtcDateTime = Field(description="the run this timer was armed for")


# -- reset from a step: an operator's repair --------------------------------------------

RESET_ID_PATTERN = r"^rst-[0-9a-f]{32}$"


RESET_RECORDS = frozenset({"workflow.reset_requested", "workflow.reset_applied"})
"""A reset and what it did: never undone by a later one (the timeline keeps every reset)."""

NOT_A_STEP = RESET_RECORDS | {
    "workflow.started",
    "event.dead_lettered",
    "review.requested",
    "workflow.attention_needed",
    "submitter.notified",
    "requester.notified",
}
"""Events that record what happened to a workflow rather than a step of it (its start is the
gateway's record; its first step is the start event): never a reset's point (the gateway
refuses one, the console offers none). After a point, they are undone with the steps."""


@event("workflow.reset_requested", 1)
class ResetRequested(EventModel):
    """An operator resets the workflow to one of its events (POST /v1/workflows/{id}/reset):
    every service rolls its checkpoint back to what it was before it handled that event,
    forgets it and the events after it, gives back what they took where it knows how (its
    ``on_reset``), and each service whose step handled the event handles it again, read
    from where it was. The gateway states it, once it checked that the workflow may be
    reset there (workflows.yaml's ``reset``)."""

    reset_id: str = Field(pattern=RESET_ID_PATTERN, description="the gateway's id of this reset")
    point_event_id: Uuid = Field(description="the event the workflow goes back to, handled again")
    point_event_type: Name
    undone: list[Uuid] = Field(
        max_length=10_000, description="the workflow's events after the point, as its timeline showed them"
    )
    requested_by: Name = Field(description="the operator's principal")
    reason: Text = Field(min_length=1)
    replacement_event_id: Uuid | None = Field(default=None, description="the corrected event's id")
    replacement: OriginalRecord | None = Field(
        default=None,
        description="edit-and-reset: the point's event as the operator corrected it, stated (and "
        "signed) by the gateway under a new id; the point itself is then among the undone, and the "
        "services that take its type handle this one instead",
    )


@event("workflow.reset_applied", 1)
class ResetApplied(EventModel):
    """What a reset did in one service (its runtime states it, in the transaction that
    did it): the steps undone, whether it handles the point's event again, and what its
    ``on_reset`` gave back."""

    service: Name
    reset_id: str = Field(pattern=RESET_ID_PATTERN)
    steps_undone: int = Field(ge=0, description="revisions of its checkpoint rolled back")
    rehandled: bool = Field(description="it handles the point's event again")
    compensated: list[Name] = Field(
        default_factory=list, description="the event types its compensation stated (budget.released)"
    )
    refused: Text | None = Field(default=None, description="why it changed nothing")


@event("workflow.spend_recorded", 1)
class SpendRecorded(EventModel):
    """What a step's language model used for the workflow (an agent loop's transcript,
    chorus.llm): model turns, tool calls, tokens and money. Stated by the service that
    spent it, for itself, with the step's other events: the workflow's spend is the sum."""

    service: Name
    step: Name = Field(description="which loop of the service (its name)")
    models: list[Name] = Field(max_length=20, description="the models that answered, first to last")
    model_turns: int = Field(ge=0)
    tool_calls: int = Field(ge=0)
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cost_micro_usd: int = Field(ge=0, description="money, in millionths of a dollar (the price table's)")


class ToolCallSaid(Model):
    """One tool call of a turn as the model asked for it and what the tool answered (JSON
    text, cut at its field's length)."""

    id: Text
    name: Name
    arguments: Text
    result: Text = ""
    error: Text | None = None


class TurnSaid(Model):
    """What the model saw and said in one turn: sealed as personal data (it derives from the
    workflow's input), opened for whoever may read the workflow."""

    prompt: LongText | None = Field(default=None, description="the messages the loop began from (first turn)")
    answer: LongText | None = None
    tool_calls: list[ToolCallSaid] = Field(default_factory=list, max_length=50)
    refused: list[Text] = Field(default_factory=list, max_length=50, description="why its answer was refused")


@event("agent.turn_recorded", 1)
class AgentTurnRecorded(EventModel):
    """One model turn of an agent loop (chorus.llm) and the tool calls it led to, stated
    with the step that ran the loop: the workflow's audit trail shows the loop turn by turn."""

    service: Name
    step: Name = Field(description="which loop of the service (its name)")
    turn: int = Field(ge=1)
    model: Name = Field(description="the model that answered, as configured (a fallback's when it answered)")
    response_model: Name | None = None
    passed_over: list[Text] = Field(
        default_factory=list, max_length=20, description="models that could not answer first"
    )
    tools_called: list[Name] = Field(default_factory=list, max_length=50)
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cost_micro_usd: int = Field(ge=0)
    said: Personal[TurnSaid]


@event("agent.output_streamed", 1)
class AgentOutputStreamed(EventModel):
    """What the model is writing in a turn of an agent loop whose step is still running (a
    long answer, streamed), stated by the service running it with a checkpoint: the
    workflow's status shows it until the step moves on. Not the step's outcome: the turn's
    agent.turn_recorded, with the step, says what it answered."""

    service: Name
    step: Name = Field(description="which loop of the service (its name)")
    turn: int = Field(ge=1)
    model: Name
    chars: int = Field(ge=0, description="how much the model has written in this turn so far")
    text: Personal[LongText] = Field(description="what it has written so far (its last 6,000 characters)")
