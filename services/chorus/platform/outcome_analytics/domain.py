"""The outcome view: pure aggregation of lifecycle, escalation and dead-letter events.

No I/O, no clock, no Kafka. :func:`fact_of` reduces a decoded event to a :class:`Fact`;
:func:`fold` folds a fact into its workflow's :class:`WorkflowState` and says which
per-``(workflow type, hour)`` buckets change (:class:`Delta`); :class:`OutcomeView` does
both over a :class:`ViewStore` (dicts here, faust tables in the service). Hours are
tumbling one-hour windows on the event's own ``occurred_at`` (UTC), never on the
time the event is read, so a rebuild from the beginning of the topics gives the
same numbers as the live view did.

The view converges to the same state whatever order the events arrive in. That
matters because its inputs are four topics with no order between them, and a
rebuild reads them all at once: a ``workflow.ended`` may be applied before its
``workflow.started``, a dead letter before anything that tells its workflow type.

Counting rules (each one idempotent, so redelivered or republished events count once):

- ``started``: workflows with a ``workflow.started``, in the hour it occurred.
- ``ended[outcome]``: workflows with a ``workflow.ended``, by outcome, in the hour
  it occurred. ``ended["compensated"]`` is the compensated count, ``ended["failed"]``
  the workflows that ended failed. Only a workflow's first end counts.
- ``escalated``: distinct workflows with an ``approval.requested`` or
  ``review.requested`` in the hour. Distinct per bucket: a workflow escalated in
  two hours counts in both (the only order-independent choice).
- ``dead_lettered[category]``: ``event.dead_lettered`` events (distinct event ids)
  by ``error.category``, in the hour the dead letter occurred, under the type of
  the workflow the original record belonged to, ``unknown`` until that is known.
- ``durations``: ``workflow.ended.occurred_at - workflow.started.occurred_at`` in
  seconds, in the ended event's bucket, once both are known.
- ``completed_cost``: what the language models of the workflows that completed spent
  (their ``workflow.spend_recorded``, distinct event ids), in the hour they completed
  (a record after the end adds to that hour): with ``ended["completed"]``, the cost per
  completed workflow.

By release (versioned rollouts, :meth:`OutcomeView.releases`): the same numbers per
service, release and workflow type, over all time, for the workflows whose
``workflow.started`` pinned them to a release (``Envelope.pins``): a canary and its stable
release side by side. Derived on reading from what is kept per workflow, so it converges
whatever the order too; a workflow started before pinning existed counts in no release.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import heapq
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, NamedTuple, Protocol, get_args
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from chorus.base.compat import fromisoformat
from chorus.contracts.approvals import ApprovalRequested
from chorus.contracts.base import EventModel, in_utc, is_sealed
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import Outcome, SpendRecorded, WorkflowEnded, WorkflowStarted
from chorus.contracts.platform import ErrorCategory, EventDeadLettered, ReviewRequested

OUTCOMES: tuple[str, ...] = get_args(Outcome)
ERROR_CATEGORIES: tuple[str, ...] = get_args(ErrorCategory)
UNKNOWN_TYPE = "unknown"
PERCENTILES: tuple[int, ...] = (50, 90, 99)
HOUR = timedelta(hours=1)

CONSUMED: tuple[type[EventModel], ...] = (
    WorkflowStarted,
    WorkflowEnded,
    ApprovalRequested,
    ReviewRequested,
    EventDeadLettered,
    SpendRecorded,
)
ACCEPT: dict[str, int] = {model.event_type: model.version for model in CONSUMED}
"""Event type -> the version this code reads (older ones are upcast, newer refused)."""


class BucketKey(NamedTuple):
    workflow_type: str
    hour: datetime
    """Start of the UTC hour (tz-aware)."""


def hour_of(moment: datetime) -> datetime:
    """The start of the UTC hour containing ``moment`` (which must be tz-aware)."""
    if moment.tzinfo is None:
        raise ValueError("hour_of needs a timezone-aware datetime")
    return moment.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def format_hour(hour: datetime) -> str:
    return hour.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:00:00Z")


def parse_hour(text: str) -> datetime:
    """An ISO 8601 date-time (``2026-03-01T10``, ``...T10:30:00Z``, ``...+02:00``) -> its hour.

    A time without an offset is UTC. Raises ValueError for anything else, and for an hour
    outside the years 1 to 9999 in UTC.
    """
    moment = fromisoformat(text.strip())
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return hour_of(in_utc(moment))


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of ascending values, by linear interpolation.

    Between closest ranks, like numpy's default and Excel's PERCENTILE.INC: rank
    ``(n - 1) * p / 100``. One value is every percentile of itself. Raises
    ValueError on no values.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is outside 0..100")
    rank = (len(sorted_values) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = rank - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def duration_summary(sorted_values: Sequence[float]) -> dict[str, Any]:
    """``{"count": n, "p50": s, "p90": s, "p99": s}``; percentiles are None without values."""
    summary: dict[str, Any] = {"count": len(sorted_values)}
    for p in PERCENTILES:
        summary[f"p{p}"] = percentile(sorted_values, p) if sorted_values else None
    return summary


class Fact(BaseModel):
    """One counted event, reduced to what the view needs.

    The intake turns each verified record of the four input topics into one and sends it,
    keyed by :attr:`key`, to the view's own topic: every fact of a workflow then lands on
    one partition, whatever topic it came from, so one replica owns that workflow's state.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["started", "ended", "escalated", "dead_lettered", "spent"]
    event_id: UUID
    workflow_id: str | None
    """None only for a dead letter of a record that names no workflow (poison bytes)."""
    workflow_type: str
    """The event's type; a dead letter's is its original record's, ``unknown`` when unread."""
    occurred_at: AwareDatetime
    outcome: str | None = None
    category: str | None = None
    """A dead letter's ``error.category``."""
    service: str | None = None
    """The service that wrote a dead letter."""
    pins: dict[str, str] = Field(default_factory=dict)
    cost_micro_usd: int = 0
    """What a ``spent`` fact's models cost."""

    @property
    def key(self) -> str:
        """The workflow whose state this fact changes (a poison letter is its own)."""
        return self.workflow_id or f"dead-letter:{self.event_id}"


class PendingLetter(NamedTuple):
    hour: datetime
    category: str


class WorkflowState(BaseModel):
    """What the view remembers of one workflow to keep every count exact and idempotent."""

    model_config = ConfigDict(extra="forbid")

    workflow_type: str | None = None
    started_at: AwareDatetime | None = None
    ended_at: AwareDatetime | None = None
    ended_in: BucketKey | None = None
    outcome: str | None = None
    pins: dict[str, str] = Field(default_factory=dict)
    """Service -> the release the workflow was pinned to when it started."""
    escalated_in: list[AwareDatetime] = Field(default_factory=list)
    """The hours it counts as escalated in."""
    letters: list[UUID] = Field(default_factory=list)
    """Event ids of its dead letters already counted."""
    dead_lettered: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Dead letters by the service that wrote them, by category."""
    pending: list[PendingLetter] = Field(default_factory=list)
    """Dead letters counted under ``unknown`` until an event tells the workflow's type."""
    spent: list[UUID] = Field(default_factory=list)
    """Event ids of its spend records already counted."""
    cost_micro_usd: int = 0
    """What they add up to."""


@dataclass(frozen=True)
class Delta:
    """One change to one bucket, the result of folding a fact."""

    key: BucketKey
    started: int = 0
    ended: str | None = None
    escalated: int = 0
    dead_lettered: str | None = None
    letters: int = 0
    """+1 or -1 (a letter moved from ``unknown`` to the type) on ``dead_lettered``."""
    duration: float | None = None
    completed_cost: int = 0
    """Micro-dollars the completed workflows' models spent."""


@dataclass
class Bucket:
    """The numbers of one workflow type in one hour (or one partition's share of them)."""

    started: int = 0
    ended: Counter[str] = field(default_factory=Counter)
    escalated: int = 0
    dead_lettered: Counter[str] = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)
    """Seconds, kept sorted so percentiles are exact."""
    completed_cost: int = 0
    """Micro-dollars."""

    def is_empty(self) -> bool:
        return not (self.started or +self.ended or self.escalated or +self.dead_lettered or self.durations)

    def add(self, delta: Delta) -> None:
        self.started += delta.started
        self.escalated += delta.escalated
        self.completed_cost += delta.completed_cost
        if delta.ended is not None:
            self.ended[delta.ended] += 1
        if delta.dead_lettered is not None:
            self.dead_lettered[delta.dead_lettered] += delta.letters
        if delta.duration is not None:
            bisect.insort(self.durations, delta.duration)

    def merge(self, other: Bucket) -> None:
        self.started += other.started
        self.escalated += other.escalated
        self.completed_cost += other.completed_cost
        self.ended.update(other.ended)
        self.dead_lettered.update(other.dead_lettered)
        self.durations = list(heapq.merge(self.durations, other.durations))

    def to_json(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "ended": dict(+self.ended),
            "escalated": self.escalated,
            "dead_lettered": {k: v for k, v in self.dead_lettered.items() if v},
            "durations": self.durations,
            "completed_cost": self.completed_cost,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Bucket:
        return cls(
            started=data["started"],
            ended=Counter(data["ended"]),
            escalated=data["escalated"],
            dead_lettered=Counter(data["dead_lettered"]),
            durations=list(data["durations"]),
            completed_cost=data.get("completed_cost", 0),  # a bucket kept before it was counted
        )


def fact_of(envelope: Envelope, payload: EventModel) -> Fact | None:
    """The fact a decoded event states, or None for a type the view does not count."""
    common: dict[str, Any] = {"event_id": envelope.event_id, "occurred_at": envelope.occurred_at}
    if isinstance(payload, EventDeadLettered):
        # A dead letter's envelope belongs to the dead letter, not to a workflow
        # (a poison record's is "poison:<topic>:<partition>:<offset>"/unknown).
        # The original record is personal data, sealed: this view counts without reading it
        # (the letter names the workflow it belongs to; a poison record's has none).
        sealed = is_sealed(payload.original)
        original = None if sealed else _original_envelope(payload.original.value_b64)
        workflow_id = payload.original_workflow_id or (
            original.workflow_id
            if original is not None
            else (None if sealed else _key_text(payload.original.key_b64))
        )
        return Fact(
            kind="dead_lettered",
            workflow_id=workflow_id,
            workflow_type=original.workflow_type if original is not None else UNKNOWN_TYPE,
            category=payload.error.category,
            service=payload.service,
            **common,
        )
    common.update(workflow_id=envelope.workflow_id, workflow_type=envelope.workflow_type)
    if isinstance(payload, WorkflowStarted):
        return Fact(kind="started", pins=dict(envelope.pins or {}), **common)
    if isinstance(payload, WorkflowEnded):
        return Fact(kind="ended", outcome=payload.outcome, **common)
    if isinstance(payload, ApprovalRequested | ReviewRequested):
        return Fact(kind="escalated", **common)
    if isinstance(payload, SpendRecorded):
        return Fact(kind="spent", cost_micro_usd=payload.cost_micro_usd, **common)
    return None


def fold(state: WorkflowState, fact: Fact) -> tuple[WorkflowState, list[Delta]]:
    """The workflow's state after ``fact``, and what changes in the buckets.

    Pure and idempotent: a fact already folded in returns the same state and no deltas.
    Whatever order a workflow's facts come in, the deltas sum to the same buckets.
    """
    state = state.model_copy(deep=True)
    deltas: list[Delta] = []
    hour = hour_of(fact.occurred_at)
    if fact.kind == "dead_lettered":
        # Counted per event id: the runtime derives it from the cause, so a dead letter
        # republished (a relay retry, a rebuilt view re-dead-lettering the same poison
        # record) carries the id of the first one.
        if fact.event_id in state.letters:
            return state, deltas
        state.letters.append(fact.event_id)
        _learn_type(state, fact.workflow_type, deltas)
        assert fact.category is not None and fact.service is not None
        if fact.workflow_id:
            by_service = state.dead_lettered.setdefault(fact.service, {})
            by_service[fact.category] = by_service.get(fact.category, 0) + 1
            if state.workflow_type is None:
                # Attributed to "unknown" for now; moved when an event of that workflow
                # tells its type (see _learn_type).
                state.pending.append(PendingLetter(hour, fact.category))
        workflow_type = state.workflow_type or UNKNOWN_TYPE
        deltas.append(Delta(BucketKey(workflow_type, hour), dead_lettered=fact.category, letters=1))
        return state, deltas
    # Every other event tells its workflow's type.
    _learn_type(state, fact.workflow_type, deltas)
    key = BucketKey(fact.workflow_type, hour)
    if fact.kind == "started" and state.started_at is None:
        state.started_at = fact.occurred_at
        state.pins = dict(fact.pins)
        deltas.append(Delta(key, started=1))
        _record_duration(state, deltas)
    elif fact.kind == "ended" and state.ended_at is None:
        assert fact.outcome is not None
        state.ended_at, state.ended_in, state.outcome = fact.occurred_at, key, fact.outcome
        deltas.append(Delta(key, ended=fact.outcome))
        _record_duration(state, deltas)
        if fact.outcome == "completed" and state.cost_micro_usd:
            deltas.append(Delta(key, completed_cost=state.cost_micro_usd))  # spent before the end
    elif fact.kind == "spent" and fact.event_id not in state.spent:
        state.spent.append(fact.event_id)
        state.cost_micro_usd += fact.cost_micro_usd
        if state.outcome == "completed" and state.ended_in is not None and fact.cost_micro_usd:
            deltas.append(Delta(state.ended_in, completed_cost=fact.cost_micro_usd))
    elif fact.kind == "escalated" and hour not in state.escalated_in:
        # Distinct per bucket: a workflow escalated in two hours counts in both.
        state.escalated_in.append(hour)
        deltas.append(Delta(key, escalated=1))
    return state, deltas


def _record_duration(state: WorkflowState, deltas: list[Delta]) -> None:
    # Called by both ends, so whichever arrives second records the duration once.
    if state.started_at is None or state.ended_at is None or state.ended_in is None:
        return
    seconds = (state.ended_at - state.started_at).total_seconds()
    deltas.append(Delta(state.ended_in, duration=seconds))


def _learn_type(state: WorkflowState, workflow_type: str, deltas: list[Delta]) -> None:
    """Remember a workflow's type; its pending dead letters move from ``unknown`` to it."""
    if workflow_type == UNKNOWN_TYPE or state.workflow_type is not None:
        return
    state.workflow_type = workflow_type
    for hour, category in state.pending:
        deltas.append(Delta(BucketKey(UNKNOWN_TYPE, hour), dead_lettered=category, letters=-1))
        deltas.append(Delta(BucketKey(workflow_type, hour), dead_lettered=category, letters=1))
    state.pending.clear()


class ViewStore(Protocol):
    """Where the view keeps its state: plain dicts here, faust tables in the service."""

    def state(self, key: str) -> WorkflowState | None: ...

    def put_state(self, key: str, state: WorkflowState) -> None: ...

    def add(self, key: BucketKey, change: Bucket) -> None:
        """Add ``change`` (counts to add, durations to insert) to the bucket ``key``."""
        ...

    def states(self) -> Iterable[WorkflowState]: ...

    def shares(self) -> Iterable[tuple[BucketKey, Bucket]]:
        """Every bucket, possibly in several shares (one per partition) to be summed."""
        ...


class MemoryStore:
    """The view in process memory (tests, and a view read once from a list of events)."""

    def __init__(self) -> None:
        self._states: dict[str, WorkflowState] = {}
        self._buckets: dict[BucketKey, Bucket] = {}

    def state(self, key: str) -> WorkflowState | None:
        return self._states.get(key)

    def put_state(self, key: str, state: WorkflowState) -> None:
        self._states[key] = state

    def add(self, key: BucketKey, change: Bucket) -> None:
        self._buckets.setdefault(key, Bucket()).merge(change)

    def states(self) -> Iterable[WorkflowState]:
        return self._states.values()

    def shares(self) -> Iterable[tuple[BucketKey, Bucket]]:
        return self._buckets.items()


class OutcomeView:
    """The view over a store: facts folded in, rows, releases and totals read out.

    Not thread-safe: one task applies facts (the faust agent, concurrency 1) and
    readers run on the same event loop.
    """

    def __init__(self, store: ViewStore | None = None) -> None:
        self.store: ViewStore = store if store is not None else MemoryStore()
        self.applied = 0
        """Facts that changed the view in this process (duplicates excluded)."""

    # -- applying events --------------------------------------------------------------

    def apply(self, envelope: Envelope, payload: EventModel) -> bool:
        """Fold one decoded event into the view; returns whether the view changed."""
        fact = fact_of(envelope, payload)
        return fact is not None and self.apply_fact(fact)

    def apply_fact(self, fact: Fact) -> bool:
        """Fold one fact in; returns whether a bucket changed. Idempotent."""
        before = self.store.state(fact.key)
        after, deltas = fold(before or WorkflowState(), fact)
        # The state first: a crash between the two writes can then only leave a count
        # out (the fact is read again and found folded in), never count it twice.
        if after != before:
            self.store.put_state(fact.key, after)
        # One write per bucket: an end changes its bucket twice (the count, the duration).
        changes: dict[BucketKey, Bucket] = {}
        for delta in deltas:
            changes.setdefault(delta.key, Bucket()).add(delta)
        for key, change in changes.items():
            self.store.add(key, change)
        if deltas:
            self.applied += 1
        return bool(deltas)

    # -- reading ------------------------------------------------------------------------

    def buckets(self) -> dict[BucketKey, Bucket]:
        """Every non-empty bucket, its shares summed."""
        summed: dict[BucketKey, Bucket] = {}
        for key, share in self.store.shares():
            summed.setdefault(key, Bucket()).merge(share)
        return {key: bucket for key, bucket in summed.items() if not bucket.is_empty()}

    def rows(self, *, workflow_type: str | None = None, hour: datetime | None = None) -> list[dict[str, Any]]:
        """JSON-ready buckets, oldest hour first, optionally for one type and/or one hour."""
        buckets = self.buckets()
        keys = sorted(
            (
                key
                for key in buckets
                if (workflow_type is None or key.workflow_type == workflow_type)
                and (hour is None or key.hour == hour)
            ),
            key=lambda key: (key.hour, key.workflow_type),
        )
        return [bucket_row(key, buckets[key]) for key in keys]

    def releases(self, *, service: str | None = None) -> list[dict[str, Any]]:
        """JSON-ready numbers per (service, release, workflow type) of the pinned workflows."""
        groups: dict[tuple[str, str, str], list[WorkflowState]] = {}
        for workflow in self.store.states():
            workflow_type = workflow.workflow_type or UNKNOWN_TYPE
            for pinned_service, release in workflow.pins.items():
                if service is None or pinned_service == service:
                    groups.setdefault((pinned_service, release, workflow_type), []).append(workflow)
        return [release_row(key, workflows) for key, workflows in sorted(groups.items())]

    def totals(self) -> dict[str, TypeTotals]:
        """Per workflow type, every hour summed (what the Prometheus endpoint exposes)."""
        by_type: dict[str, list[Bucket]] = {}
        for key, bucket in self.buckets().items():
            by_type.setdefault(key.workflow_type, []).append(bucket)
        return {wt: TypeTotals.of(buckets) for wt, buckets in sorted(by_type.items())}


def bucket_row(key: BucketKey, bucket: Bucket) -> dict[str, Any]:
    return {
        "workflow_type": key.workflow_type,
        "hour": format_hour(key.hour),
        "started": bucket.started,
        "ended": {outcome: bucket.ended[outcome] for outcome in OUTCOMES},
        "escalated": bucket.escalated,
        "dead_lettered": {category: bucket.dead_lettered[category] for category in ERROR_CATEGORIES},
        "duration_s": duration_summary(bucket.durations),
        "cost": cost_summary(bucket.completed_cost, bucket.ended["completed"]),
    }


def cost_summary(completed_cost: int, completed: int) -> dict[str, Any]:
    """What the completed workflows' language models cost, in all and per workflow (None
    with none completed), in dollars."""
    return {
        "completed_usd": completed_cost / 1e6,
        "per_completed_usd": round(completed_cost / completed / 1e6, 6) if completed else None,
    }


def release_row(key: tuple[str, str, str], workflows: list[WorkflowState]) -> dict[str, Any]:
    service, release, workflow_type = key
    ended = Counter(w.outcome for w in workflows if w.outcome is not None)
    dead: Counter[str] = Counter()
    for workflow in workflows:  # a release answers for its own service's dead letters only
        dead.update(workflow.dead_lettered.get(service, {}))
    durations = sorted(
        (w.ended_at - w.started_at).total_seconds()
        for w in workflows
        if w.started_at is not None and w.ended_at is not None
    )
    return {
        "service": service,
        "release": release,
        "workflow_type": workflow_type,
        "started": sum(1 for w in workflows if w.started_at is not None),
        "ended": {outcome: ended[outcome] for outcome in OUTCOMES},
        "completion_rate": round(ended["completed"] / sum(ended.values()), 4) if ended else None,
        "escalated": sum(1 for w in workflows if w.escalated_in),
        "dead_lettered": {category: dead[category] for category in ERROR_CATEGORIES},
        "duration_s": duration_summary(durations),
    }


@dataclass(frozen=True)
class TypeTotals:
    """One workflow type over every hour in the view."""

    started: int
    ended: dict[str, int]
    escalated: int
    """Sum of the per-hour distinct counts."""
    dead_lettered: dict[str, int]
    durations: list[float]
    """Every duration, ascending."""
    completed_cost: int
    """Micro-dollars the completed workflows' models spent."""

    @classmethod
    def of(cls, buckets: Iterable[Bucket]) -> TypeTotals:
        buckets = list(buckets)
        ended: Counter[str] = Counter()
        dead: Counter[str] = Counter()
        for bucket in buckets:
            ended.update(bucket.ended)
            dead.update(bucket.dead_lettered)
        return cls(
            started=sum(b.started for b in buckets),
            ended={outcome: ended[outcome] for outcome in OUTCOMES},
            escalated=sum(b.escalated for b in buckets),
            dead_lettered={category: dead[category] for category in ERROR_CATEGORIES},
            durations=list(heapq.merge(*(b.durations for b in buckets))),
            completed_cost=sum(b.completed_cost for b in buckets),
        )


def _original_envelope(value_b64: str) -> Envelope | None:
    """The dead-lettered record's own envelope, when its bytes hold a valid one."""
    try:
        body = json.loads(base64.b64decode(value_b64, validate=True))
        return Envelope.model_validate(body) if isinstance(body, dict) else None
    except (binascii.Error, ValueError, ValidationError):
        # Poison bytes (not base64, not JSON, not an envelope): nothing to learn from them.
        return None


def _key_text(key_b64: str | None) -> str | None:
    """The original record's key: by convention the workflow id."""
    if not key_b64:
        return None
    try:
        return base64.b64decode(key_b64, validate=True).decode("utf-8") or None
    except (binascii.Error, UnicodeDecodeError):
        return None
