"""Audit decisions, free of I/O: what one event means for the audit log and for the
status of its workflow, plus the retention and erasure rules.

The status projection is a *fold* over a workflow's events that does not depend on
their order. Events of one workflow arrive in order per topic but interleave across
topics, a restart redelivers some of them, and a replay interleaves them differently
again; every component of :class:`WorkflowFacts` is therefore a minimum, a maximum, a
count, a sticky flag or a per-approval merge, each keyed by ``(occurred_at, event_id)``.
Folding the same set of events in any order yields the same facts, so the live
projection and a replay produce the same rows (the replay checksum relies on it).
The fold is not idempotent for counts: the inbox and the audit log's primary key make
sure each event is folded once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from chorus.contracts.api.audit_projector import (
    ApprovalState,
    Attention,
    PendingApproval,
    Spend,
    StatusView,
    Streaming,
)
from chorus.contracts.approvals import (
    ApprovalDecided,
    ApprovalDecisionSubmitted,
    ApprovalEscalated,
    ApprovalRequested,
    ApprovalRouted,
)
from chorus.contracts.base import CATALOG, EventModel, is_sealed
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import (
    AgentOutputStreamed,
    AgentTurnRecorded,
    AwaitsSignal,
    Signal,
    SignalAnswer,
    SpendRecorded,
    SubmitterNotified,
    WorkflowAttentionNeeded,
    WorkflowEnded,
    WorkflowStarted,
)
from chorus.contracts.platform import EventDeadLettered, ReviewRequested
from chorus.contracts.procurement import (
    BudgetRejected,
    BudgetReserved,
    InvoiceRejected,
    InvoiceValidated,
    PaymentIssued,
)
from chorus.contracts.registry import SearchAttribute
from chorus.contracts.research import ReportDelivered

# -- statuses -------------------------------------------------------------------------------

RUNNING = "running"
WAITING = "waiting"
ATTENTION = "attention"
"""A dead letter is the latest thing that happened: an operator has to act."""
TERMINAL = frozenset({"completed", "rejected", "failed", "compensated", "timed_out", "cancelled", "erased"})
STATUSES = frozenset({RUNNING, WAITING, ATTENTION, *TERMINAL})

HUMAN_REVIEW = "human review"
ERASED: dict[str, Any] = {"erased": True}
"""What personal data is replaced with (audit payloads, results, approval contexts)."""

# Events of the platform rather than of the workflow's domain: they never become the
# workflow's "current stage"; some flag it (attention, review), one says who was told.
PLATFORM_EVENTS = frozenset(
    {
        "event.dead_lettered",
        "review.requested",
        "workflow.attention_needed",
        "submitter.notified",
        "workflow.reset_requested",
        "workflow.reset_applied",
        "workflow.spend_recorded",
        "agent.turn_recorded",
        "agent.output_streamed",
    }
)

# Rows the projector writes itself (not derived from any topic).
ORIGIN_TOPIC = "topic"
ORIGIN_JANITOR = "janitor"
ORIGIN_ERASURE = "erasure"
ORIGIN_RESET = "reset"
"""An operator's correction of a reset's point: stated by the gateway inside the reset's
request (chorus.resets), on no topic of its own."""
WORKFLOW_PURGED = "audit.workflow_purged"
ERASURE_RECORDED = "audit.erasure_recorded"


# -- the audit log ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditEntry:
    """One audit-log row, as derived from one event (``recorded_at`` is added on write)."""

    event_id: UUID
    event_type: str
    schema_version: int
    workflow_id: str
    workflow_type: str
    producer: str
    producer_version: str
    """The release of the producer that wrote it (versioned rollouts: which one took the step)."""
    occurred_at: datetime
    trace_id: str
    causation_id: str | None
    decision: str | None
    actor: str | None
    external_call: str | None
    subject_ref: str | None
    payload: dict[str, Any]


# The columns an audit row copies from the envelope's fields of the same name, as they are
# (model_dump's Python mode keeps the UUID and the datetime).
_AS_ENVELOPE_HAS_IT = {
    "event_id",
    "event_type",
    "schema_version",
    "workflow_id",
    "workflow_type",
    "occurred_at",
    "causation_id",
    "subject_ref",
}


def audit_entry(envelope: Envelope, payload: EventModel) -> AuditEntry:
    """The audit row of an event. ``payload`` is the decoded model (typed access);
    the row keeps the payload exactly as it was sent (``envelope.payload``)."""
    return AuditEntry(
        **envelope.model_dump(include=_AS_ENVELOPE_HAS_IT),
        producer=envelope.producer.service,
        producer_version=envelope.producer.version,
        trace_id=envelope.traceparent[3:35],
        decision=decision_of(payload),
        actor=actor_of(payload),
        external_call=external_call_of(payload),
        payload=dict(envelope.payload),
    )


def decision_of(payload: EventModel) -> str | None:
    """The decision a decision event records; None for every other event."""
    if isinstance(payload, ApprovalDecided | ApprovalDecisionSubmitted):
        return payload.decision
    if isinstance(payload, InvoiceRejected | BudgetRejected):
        return "reject"
    if isinstance(payload, InvoiceValidated | BudgetReserved):
        return "accept"
    return None


def actor_of(payload: EventModel) -> str | None:
    """The person (or fallback) behind a human decision."""
    if isinstance(payload, ApprovalDecided):
        return payload.decided_by
    if isinstance(payload, ApprovalDecisionSubmitted):
        return payload.reviewer
    return None


def external_call_of(payload: EventModel) -> str | None:
    """The call to a system outside Chorus that an event reports having made."""
    if isinstance(payload, PaymentIssued):
        return f"payment provider: {payload.provider_reference}"
    if isinstance(payload, ReportDelivered):
        return f"webhook: {payload.delivered_to} (HTTP {payload.status_code})"
    if isinstance(payload, SubmitterNotified):
        return f"{payload.channel} to the submitter ({payload.notice})"
    if isinstance(payload, AgentOutputStreamed):
        return f"turn {payload.turn}: {payload.model} writing ({payload.chars} characters so far)"
    if isinstance(payload, AgentTurnRecorded):
        # The loop turn by turn: who answered, and the tools it called (or its answer).
        did = f"called {', '.join(payload.tools_called)}" if payload.tools_called else "answered"
        return f"turn {payload.turn}: {payload.model} {did}"
    return None


def redact_entry(entry: AuditEntry) -> AuditEntry:
    """The row as kept for an erased subject: what happened and when, but no payload,
    no actor, no external address and no link to the subject."""
    return AuditEntry(
        **{
            **entry.__dict__,
            "payload": dict(ERASED),
            "actor": None,
            "external_call": None,
            "subject_ref": None,
        }
    )


# -- the status fold --------------------------------------------------------------------------


class _Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Stamp(_Fact):
    """When something happened, with the event id as a tie-breaker (total order)."""

    at: datetime
    event_id: str

    def key(self) -> tuple[datetime, str]:
        return (self.at, self.event_id)

    def tagged(self, value: str) -> Tagged:
        """``value``, stamped with this stamp."""
        return Tagged(at=self.at, event_id=self.event_id, value=value)


class Tagged(Stamp):
    """A stamped value (an event type, a workflow type, a subject reference)."""

    value: str


class Attribute(Stamp):
    """A search attribute's value, stamped with the event that stated it."""

    value: str | int | float


T = TypeVar("T", bound=Stamp)


class Ended(Stamp):
    outcome: str
    reason: str | None
    result: dict[str, Any]


class Streamed(Stamp):
    """The latest agent.output_streamed (its text sealed, as the event carried it)."""

    service: str
    step: str
    turn: int
    model: str
    chars: int
    text: str


class Escalation(Stamp):
    level: int
    tier: str
    waiting_until: datetime


class ApprovalFacts(_Fact):
    """What is known of one approval gate; any of its events may arrive first."""

    requested: Stamp | None = None
    tier: str | None = None
    """The first tier of the chain (who decides at level 0)."""
    window_s: float | None = None
    routed: Tagged | None = None
    """approval.routed: the gate's policy chose the chain (its value: first tier)."""
    routed_window_s: float | None = None
    context: dict[str, Any] | str | None = None
    """The review context, sealed as its event carried it (opened by the read API)."""
    escalation: Escalation | None = None
    """The highest level reached."""
    decided: Tagged | None = None
    """The first decision (its value is approve / reject / revise)."""


class WorkflowFacts(_Fact):
    """Everything the status of one workflow is derived from (stored as ``facts`` jsonb)."""

    workflow_type: Tagged
    """The workflow type of the earliest event."""
    subject: Tagged | None = None
    """The subject reference of the earliest event that has one."""
    first_at: datetime
    last_at: datetime
    events: int = 0
    stage: Tagged | None = None
    """The latest domain event (its type is the workflow's current stage)."""
    ended: Ended | None = None
    approvals: dict[str, ApprovalFacts] = {}
    last_dead_letter: Stamp | None = None
    last_dead_letter_why: Tagged | None = None
    """What the latest dead letter says (service, event, error), for "why it needs attention"."""
    attention_alert: Tagged | None = None
    """The latest workflow.attention_needed (its value: the dead letter it was raised for)."""
    last_review: Stamp | None = None
    dead_letters: int = 0
    reviews: int = 0
    retries: int = 0
    """Re-tries reported by dead letters (failures retried before giving up) and by
    reviews (re-prompts with validation feedback)."""
    erased: bool = False
    """Sticky: some event of this workflow belongs to an erased subject."""
    submitter: Tagged | None = None
    """workflow.started's keyed submitter (what lists filter on)."""
    business_key: Tagged | None = None
    """workflow.started's business key (the submitter's Idempotency-Key)."""
    attributes: dict[str, Attribute] = {}
    """Its search attributes (workflows.yaml): each the value the latest event stating it said."""
    spend: Spend | None = None
    """The sum of its workflow.spend_recorded (a sum: any order gives the same)."""
    streaming: Streamed | None = None
    """The latest agent.output_streamed: shown while nothing happened after it."""


def _earliest(a: T | None, b: T | None) -> T | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a.key() <= b.key() else b


def _latest(a: T | None, b: T | None) -> T | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a.key() >= b.key() else b


def attributes_of(
    entry: AuditEntry, payload: EventModel, declared: Mapping[str, Mapping[str, SearchAttribute]]
) -> dict[str, str | int | float]:
    """The search attributes ``entry``'s event states for its workflow's type (``declared``:
    workflow type -> name -> where it is read from), read from ``payload`` as this version
    of the code reads it (an older version upcast). A field the event lacks, or holds of
    another type, states nothing."""
    found: dict[str, str | int | float] = {}
    body: dict[str, Any] | None = None
    for name, attribute in declared.get(entry.workflow_type, {}).items():
        if attribute.event != entry.event_type:
            continue
        body = payload.model_dump(mode="json") if body is None else body
        value: Any = body
        for part in attribute.field.strip("/").split("/"):
            value = value.get(part) if isinstance(value, dict) else None
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number if attribute.type == "number" else isinstance(value, str):
            found[name] = value
    return found


def fold(
    facts: WorkflowFacts | None,
    entry: AuditEntry,
    payload: EventModel,
    attributes: Mapping[str, str | int | float] | None = None,
) -> WorkflowFacts:
    """Add one event to a workflow's facts (``attributes``: the search attributes it
    states, from :func:`attributes_of`). Commutative: the order of calls does not change
    the result (see the module docstring)."""
    stamp = Stamp(at=entry.occurred_at, event_id=str(entry.event_id))
    typed = stamp.tagged(entry.workflow_type)
    subject = stamp.tagged(entry.subject_ref) if entry.subject_ref is not None else None
    if facts is None:
        facts = WorkflowFacts(workflow_type=typed, first_at=stamp.at, last_at=stamp.at)
    update: dict[str, Any] = {
        "workflow_type": _earliest(facts.workflow_type, typed),
        "subject": _earliest(facts.subject, subject),
        "first_at": min(facts.first_at, stamp.at),
        "last_at": max(facts.last_at, stamp.at),
        "events": facts.events + 1,
    }
    if entry.event_type not in PLATFORM_EVENTS and not isinstance(payload, Signal | SignalAnswer):
        # A signal and its answer are what a person asked and the workflow said: the step
        # they led to (if any) is the stage, not they.
        stage = stamp.tagged(entry.event_type)
        update["stage"] = _latest(facts.stage, stage)
    if attributes:
        stated = {name: Attribute(**stamp.model_dump(), value=value) for name, value in attributes.items()}
        update["attributes"] = {
            **facts.attributes,
            **{name: _latest(facts.attributes.get(name), value) for name, value in stated.items()},
        }
    if isinstance(payload, WorkflowStarted):
        if payload.submitter_ref is not None:
            submitter = stamp.tagged(payload.submitter_ref)
            update["submitter"] = _earliest(facts.submitter, submitter)
        if payload.business_key is not None:
            key = stamp.tagged(payload.business_key)
            update["business_key"] = _earliest(facts.business_key, key)
    elif isinstance(payload, WorkflowEnded):
        ended = Ended(
            **stamp.model_dump(), outcome=payload.outcome, reason=payload.reason, result=dict(payload.result)
        )
        # The first end wins: "nothing more happens" after it.
        update["ended"] = _earliest(facts.ended, ended)
    elif isinstance(payload, SpendRecorded | AgentOutputStreamed):
        update.update(_fold_agent(facts, stamp, payload))
    elif isinstance(payload, EventDeadLettered):
        update["last_dead_letter"] = _latest(facts.last_dead_letter, stamp)
        why = stamp.tagged(dead_letter_why(payload))
        update["last_dead_letter_why"] = _latest(facts.last_dead_letter_why, why)
        update["dead_letters"] = facts.dead_letters + 1
        update["retries"] = facts.retries + sum(1 for f in payload.failures if f.retry_in_s is not None)
    elif isinstance(payload, WorkflowAttentionNeeded):
        alert = stamp.tagged(payload.dead_letter_event_id)
        update["attention_alert"] = _latest(facts.attention_alert, alert)
    elif isinstance(payload, ReviewRequested):
        update["last_review"] = _latest(facts.last_review, stamp)
        update["reviews"] = facts.reviews + 1
        update["retries"] = facts.retries + max(0, payload.attempts - 1)
    elif isinstance(payload, ApprovalRequested | ApprovalRouted | ApprovalEscalated | ApprovalDecided):
        update["approvals"] = {
            **facts.approvals,
            payload.approval_id: _fold_approval(
                facts.approvals.get(payload.approval_id, ApprovalFacts()), stamp, payload
            ),
        }
    return facts.model_copy(update=update)


def _fold_agent(
    facts: WorkflowFacts, stamp: Stamp, payload: SpendRecorded | AgentOutputStreamed
) -> dict[str, Any]:
    """What an agent loop's records change: the spend (a sum), or what it is writing now."""
    if isinstance(payload, SpendRecorded):
        return {"spend": _add_spend(facts.spend, payload)}
    said = payload.model_dump(include={"service", "step", "turn", "model", "chars", "text"})
    return {"streaming": _latest(facts.streaming, Streamed(**stamp.model_dump(), **said))}


NOTHING_SPENT = Spend(
    model_turns=0, tool_calls=0, input_tokens=0, output_tokens=0, cost_micro_usd=0, cost_usd=0.0, models=[]
)


def _add_spend(spend: Spend | None, recorded: SpendRecorded) -> Spend:
    was = spend or NOTHING_SPENT
    cost = was.cost_micro_usd + recorded.cost_micro_usd
    return Spend(
        model_turns=was.model_turns + recorded.model_turns,
        tool_calls=was.tool_calls + recorded.tool_calls,
        input_tokens=was.input_tokens + recorded.input_tokens,
        output_tokens=was.output_tokens + recorded.output_tokens,
        cost_micro_usd=cost,
        cost_usd=cost / 1e6,
        # Sorted: the set of models, whichever record came first.
        models=sorted({*was.models, *recorded.models}),
    )


def _fold_approval(
    approval: ApprovalFacts,
    stamp: Stamp,
    payload: ApprovalRequested | ApprovalRouted | ApprovalEscalated | ApprovalDecided,
) -> ApprovalFacts:
    if isinstance(payload, ApprovalRouted):
        # Wherever it lands among the approval's events, the routed chain is the one in force.
        routed = stamp.tagged(payload.chain[0].tier)
        if approval.routed is not None and approval.routed.key() <= routed.key():
            return approval
        return approval.model_copy(update={"routed": routed, "routed_window_s": payload.chain[0].window_s})
    if isinstance(payload, ApprovalRequested):
        if approval.requested is not None and approval.requested.key() <= stamp.key():
            return approval  # a second request for the same id: the first one stands
        return approval.model_copy(
            update={
                "requested": stamp,
                "tier": payload.chain[0].tier,
                "window_s": payload.chain[0].window_s,
                # Kept sealed, as it came: the read API opens it for each reader.
                "context": payload.context
                if is_sealed(payload.context)
                else payload.context.model_dump(mode="json"),
            }
        )
    if isinstance(payload, ApprovalEscalated):
        escalation = Escalation(
            **stamp.model_dump(),
            level=payload.level,
            tier=payload.to_tier,
            waiting_until=payload.waiting_until,
        )
        current = approval.escalation
        if current is None or (escalation.level, *escalation.key()) > (
            current.level,
            *current.key(),
        ):
            return approval.model_copy(update={"escalation": escalation})
        return approval
    decided = stamp.tagged(payload.decision)
    return approval.model_copy(update={"decided": _earliest(approval.decided, decided)})


def redact_facts(facts: WorkflowFacts) -> WorkflowFacts:
    """Facts of a workflow whose subject was erased: the structure stays (status,
    stages, tiers, times), the subject reference, results, reasons and approval
    contexts go. Idempotent, and ``redact(fold(redact(f), e)) == redact(fold(f, e))``,
    so erasing before or after an event arrives ends in the same row."""
    ended = facts.ended
    if ended is not None:
        ended = ended.model_copy(update={"reason": None, "result": dict(ERASED)})
    why = facts.last_dead_letter_why  # an error message may quote the input
    if why is not None:
        why = why.model_copy(update={"value": "(erased)"})
    return facts.model_copy(
        update={
            "subject": None,
            "business_key": None,  # the submitter's name for the work may name the subject
            "ended": ended,
            "last_dead_letter_why": why,
            "approvals": {
                key: approval.model_copy(update={"context": None})
                for key, approval in facts.approvals.items()
            },
            "erased": True,
        }
    )


def pending_approval(facts: WorkflowFacts) -> PendingApproval | None:
    """The approval the workflow waits on: requested or escalated, not decided, and
    the workflow not ended. With several open gates, the most recently active one."""
    best: tuple[tuple[datetime, str], PendingApproval] | None = None
    for approval_id, approval in facts.approvals.items():
        state = approval_state(facts, approval_id)
        active = approval.escalation or approval.requested
        if state is None or state.status != "pending" or state.tier is None or active is None:
            continue
        view = PendingApproval.model_validate(state, from_attributes=True)  # its fields, by name
        if best is None or active.key() > best[0]:
            best = (active.key(), view)
    return best[1] if best is not None else None


def approval_state(facts: WorkflowFacts, approval_id: str) -> ApprovalState | None:
    """The state of gate ``approval_id`` of this workflow; None when it never saw it."""
    approval = facts.approvals.get(approval_id)
    if approval is None:
        return None
    closed_reason = None
    if approval.decided is not None:
        status = "decided"
    elif facts.ended is not None:
        status = "closed"
        ended = facts.ended
        closed_reason = f"withdrawn: the workflow ended ({ended.outcome}) at {ended.at.isoformat()}"
    else:
        status = "pending"
    esc = approval.escalation
    until = None
    if esc is not None:
        until = esc.waiting_until
    elif approval.requested is not None:
        window_s = approval.routed_window_s if approval.routed else approval.window_s
        until = approval.requested.at + timedelta(seconds=window_s or 0.0)
    return ApprovalState(
        approval_id=approval_id,
        status=status,
        tier=esc.tier if esc is not None else (approval.routed.value if approval.routed else approval.tier),
        level=esc.level if esc is not None else 0,
        waiting_until=until,
        context=approval.context,
        decision=approval.decided.value if approval.decided else None,
        decided_at=approval.decided.at if approval.decided else None,
        closed_reason=closed_reason,
        requested_at=approval.requested.at if approval.requested else None,
    )


def _after_progress(flag: Stamp | None, stage: Tagged | None) -> bool:
    """True when ``flag`` (a dead letter, a review) is newer than the last domain event:
    nothing has moved the workflow on since."""
    if flag is None:
        return False
    return stage is None or flag.key() > stage.key()


def dead_letter_why(letter: EventDeadLettered) -> str:
    what = letter.original_event_type or "a record"
    return f"{letter.service} dead-lettered {what}: {letter.error.category}: {letter.error.message}"[:1000]


def attention(facts: WorkflowFacts) -> Attention | None:
    """The dead letter a workflow in ``attention`` waits behind; None for any other status."""
    letter = facts.last_dead_letter
    if facts.ended is not None or letter is None or not _after_progress(letter, facts.stage):
        return None
    why = facts.last_dead_letter_why
    alert = facts.attention_alert
    alerted = alert is not None and alert.value == str(letter.event_id)
    return Attention(
        since=letter.at,
        why=why.value if why is not None else "a dead letter",
        dead_letter_event_id=str(letter.event_id),
        alerted_at=alert.at if alerted and alert is not None else None,
    )


def awaited_signals() -> Mapping[str, str]:
    """Event type -> the signal a workflow waits for after it (AwaitsSignal), for every
    event model imported (the platform's and a project's). Read for every event projected:
    worked out again only when a model was imported since."""
    return _awaited(len(CATALOG))


@lru_cache(maxsize=1)
def _awaited(models: int) -> Mapping[str, str]:
    return {model.event_type: model.awaits for model in CATALOG.values() if issubclass(model, AwaitsSignal)}


def derive(facts: WorkflowFacts) -> StatusView:
    """The status columns. Precedence: ended (terminal, never left) > attention (a
    dead letter after the last progress) > waiting (human review, then approval) >
    running."""
    pending = pending_approval(facts)
    awaited = awaited_signals().get(facts.stage.value) if facts.stage is not None else None
    waiting_for: str | None = None
    waiting_until: datetime | None = None
    ended = facts.ended
    if ended is not None:
        status = ended.outcome
    elif _after_progress(facts.last_dead_letter, facts.stage):
        status = ATTENTION
    elif _after_progress(facts.last_review, facts.stage):
        status, waiting_for = WAITING, HUMAN_REVIEW
    elif pending is not None:
        status = WAITING
        waiting_for, waiting_until = f"approval by {pending.tier}", pending.waiting_until
    elif awaited is not None:
        status, waiting_for = WAITING, f"signal {awaited}"
    else:
        status = RUNNING
    return StatusView(
        workflow_type=facts.workflow_type.value,
        status=status,
        stage=facts.stage.value if facts.stage else None,
        waiting_for=waiting_for,
        waiting_until=waiting_until,
        # Failed handling seen in this workflow: each dead letter, each review, each retry.
        attempts=facts.dead_letters + facts.reviews + facts.retries,
        outcome=ended.outcome if ended else None,
        outcome_reason=ended.reason if ended else None,
        result=ended.result if ended else None,
        started_at=facts.first_at,
        ended_at=ended.at if ended else None,
        duration_s=(ended.at - facts.first_at).total_seconds() if ended else None,
        last_event_at=facts.last_at,
        events=facts.events,
        subject_ref=facts.subject.value if facts.subject else None,
        pending_approval=pending,
        submitter_ref=facts.submitter.value if facts.submitter else None,
        business_key=facts.business_key.value if facts.business_key else None,
        attributes={name: attribute.value for name, attribute in sorted(facts.attributes.items())},
        spend=facts.spend,
        streaming=_streaming(facts, ended),
    )


def _streaming(facts: WorkflowFacts, ended: Ended | None) -> Streaming | None:
    """What a model is writing, while it is the latest the workflow did: a later event (the
    step's outcome, anything else) or its end hides it."""
    shown = facts.streaming
    if shown is None or ended is not None or shown.at < facts.last_at:
        return None
    return Streaming(**shown.model_dump(exclude={"event_id"}))


# -- retention ------------------------------------------------------------------------------


def lifetime(workflow_type: str, lifetimes_days: Mapping[str, float], default_days: float) -> timedelta:
    """The maximum lifetime of a workflow type (from its first event)."""
    return timedelta(days=lifetimes_days.get(workflow_type, default_days))


def expiry_cutoff(
    workflow_type: str, now: datetime, lifetimes_days: Mapping[str, float], default_days: float
) -> datetime:
    """Workflows of ``workflow_type`` that started at or before this instant are expired."""
    return now - lifetime(workflow_type, lifetimes_days, default_days)


def is_expired(
    workflow_type: str,
    started_at: datetime,
    now: datetime,
    lifetimes_days: Mapping[str, float],
    default_days: float,
) -> bool:
    return started_at <= expiry_cutoff(workflow_type, now, lifetimes_days, default_days)
