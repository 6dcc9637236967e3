"""The outcome view: pure aggregation of lifecycle, escalation and dead-letter events.

No I/O, no clock, no Kafka. Three pure steps, the same three the faust app runs in
its agents (``app.py``), each over state keyed as its partition is:

1. :func:`observe`: a decoded envelope and its typed payload -> an :class:`Observation`
   keyed by the workflow it belongs to (or None);
2. :func:`fold`: an observation into its workflow's :class:`WorkflowState` -> the
   :class:`Change` s it makes to hourly buckets (every dedup decision is taken here,
   where all of a workflow's facts meet);
3. :meth:`Bucket.apply`: a change into one ``(workflow type, hour)`` bucket.

:class:`OutcomeView` chains them in memory. Hours are tumbling one-hour windows on the
event's own ``occurred_at`` (UTC), never on the time the event is read, so a rebuild
from the beginning of the topics gives the same numbers as the live view did.

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

By release (versioned rollouts, :meth:`OutcomeView.releases`): the same numbers per
service, release and workflow type, over all time, for the workflows whose
``workflow.started`` pinned them to a release (``Envelope.pins``): a canary and its stable
release side by side. Derived on reading from what is kept per workflow
(:func:`release_partials`, which add up across partitions), so it converges whatever the
order too; a workflow started before pinning existed counts in no release.
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
from typing import Any, Literal, NamedTuple, get_args
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chorus.base.compat import fromisoformat
from chorus.contracts.approvals import ApprovalRequested
from chorus.contracts.base import EventModel, in_utc, is_sealed
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import Outcome, WorkflowEnded, WorkflowStarted
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
)
ACCEPT: dict[str, int] = {model.event_type: model.version for model in CONSUMED}
"""Event type -> the version this code reads (older ones are upcast, newer refused)."""


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


class BucketKey(NamedTuple):
    workflow_type: str
    hour: datetime
    """Start of the UTC hour (tz-aware)."""


ObservationKind = Literal["seen", "started", "ended", "escalated", "dead_lettered"]
Measure = Literal["started", "ended", "escalated", "dead_lettered", "duration"]


class Observation(BaseModel):
    """What one event tells the view about one workflow: the reader's output, keyed by ``key``.

    ``key`` is the workflow the fact belongs to, so every fact of a workflow meets its state
    in one partition: the event's workflow id, a dead letter's original workflow, or
    ``deadletter:<id>`` for a dead letter that names none (it stays ``unknown``).
    """

    model_config = ConfigDict(frozen=True)

    key: str
    kind: ObservationKind
    workflow_type: str
    """The type the event states (a dead letter: its original's, when that says); or unknown."""
    occurred_at: datetime
    outcome: str | None = None
    pins: dict[str, str] = Field(default_factory=dict)
    letter_id: UUID | None = None
    category: str | None = None
    service: str | None = None
    """Who wrote the dead letter (a release answers for its own service's letters only)."""


class Change(BaseModel):
    """One step of one hourly bucket: ``amount`` more (or fewer) of ``measure`` (``label``:
    the outcome or error category), or one more duration. Produced only by :func:`fold`,
    which has already made every fact count once."""

    model_config = ConfigDict(frozen=True)

    workflow_type: str
    hour: datetime
    measure: Measure
    label: str = ""
    amount: int = 1
    seconds: float | None = None


class Letter(BaseModel):
    hour: datetime
    category: str
    service: str
    counted_as: str
    """The workflow type the letter is counted under (unknown until a event tells it)."""


class WorkflowState(BaseModel):
    """What is remembered of one workflow to keep every count exact: its facts, first ones only."""

    workflow_type: str | None = None
    started_at: datetime | None = None
    pins: dict[str, str] = Field(default_factory=dict)
    """Service -> the release the workflow was pinned to when it started."""
    ended_at: datetime | None = None
    ended_type: str | None = None
    """The type its end stated: the bucket of its end and of its duration."""
    outcome: str | None = None
    escalated: list[datetime] = Field(default_factory=list)
    """Hours in which it was escalated (each counted once)."""
    letters: dict[str, Letter] = Field(default_factory=dict)
    """Its dead letters by id."""


def observe(envelope: Envelope, payload: EventModel) -> Observation | None:
    """The fact one decoded event states, or None for one that says nothing about a workflow."""
    if isinstance(payload, EventDeadLettered):
        return _observe_dead_letter(envelope, payload)
    kind: ObservationKind = "seen"
    if isinstance(payload, WorkflowStarted):
        kind = "started"
    elif isinstance(payload, WorkflowEnded):
        kind = "ended"
    elif isinstance(payload, ApprovalRequested | ReviewRequested):
        kind = "escalated"
    if kind == "seen" and envelope.workflow_type == UNKNOWN_TYPE:
        return None  # tells nothing: no type to learn, nothing to count
    return Observation(
        key=envelope.workflow_id,
        kind=kind,
        workflow_type=envelope.workflow_type,
        occurred_at=envelope.occurred_at,
        outcome=payload.outcome if isinstance(payload, WorkflowEnded) else None,
        pins=dict(envelope.pins or {}) if kind == "started" else {},
    )


def _observe_dead_letter(envelope: Envelope, payload: EventDeadLettered) -> Observation:
    # A dead letter's envelope belongs to the dead letter, not to a workflow (a poison
    # record's is "poison:<topic>:<partition>:<offset>"/unknown). The original record is
    # personal data, sealed: this view counts without reading it (the letter names the
    # workflow it belongs to; a poison record's has none).
    sealed = is_sealed(payload.original)
    original = None if sealed else _original_envelope(payload.original.value_b64)
    workflow_id = payload.original_workflow_id or (
        original.workflow_id
        if original is not None
        else (None if sealed else _key_text(payload.original.key_b64))
    )
    learned = UNKNOWN_TYPE
    if original is not None and original.workflow_id == workflow_id:
        learned = original.workflow_type
    return Observation(
        # Counted per event id: the runtime derives it from the cause, so a dead letter
        # republished (a relay retry, a rebuilt view re-dead-lettering the same poison
        # record) carries the id of the first one, and lands on the same key.
        key=workflow_id or f"deadletter:{envelope.event_id}",
        kind="dead_lettered",
        workflow_type=learned,
        occurred_at=envelope.occurred_at,
        letter_id=envelope.event_id,
        category=payload.error.category,
        service=payload.service,
    )


def fold(state: WorkflowState, seen: Observation) -> list[Change]:
    """Fold one observation into its workflow's ``state`` (mutated); the bucket changes it makes.

    Idempotent: a second delivery of the same fact changes nothing and returns no change.
    Order-independent: whatever order a workflow's facts arrive in, the changes sum up to
    the same buckets.
    """
    changes = _learn_type(state, seen.workflow_type)
    hour = hour_of(seen.occurred_at)
    if seen.kind == "dead_lettered":
        assert seen.letter_id is not None and seen.category is not None
        letter_id = str(seen.letter_id)
        if letter_id in state.letters:
            return changes
        counted_as = state.workflow_type or UNKNOWN_TYPE
        state.letters[letter_id] = Letter(
            hour=hour, category=seen.category, service=seen.service or "", counted_as=counted_as
        )
        changes.append(
            Change(workflow_type=counted_as, hour=hour, measure="dead_lettered", label=seen.category)
        )
    elif seen.kind == "started" and state.started_at is None:
        state.started_at = seen.occurred_at
        state.pins = dict(seen.pins)
        changes.append(Change(workflow_type=seen.workflow_type, hour=hour, measure="started"))
        changes += _duration(state)
    elif seen.kind == "ended" and state.ended_at is None:
        assert seen.outcome is not None
        state.ended_at, state.ended_type, state.outcome = seen.occurred_at, seen.workflow_type, seen.outcome
        changes.append(
            Change(workflow_type=seen.workflow_type, hour=hour, measure="ended", label=seen.outcome)
        )
        changes += _duration(state)
    elif seen.kind == "escalated" and hour not in state.escalated:
        # Distinct per hour: a workflow escalated in two hours counts in both (the only
        # order-independent choice).
        state.escalated.append(hour)
        changes.append(Change(workflow_type=seen.workflow_type, hour=hour, measure="escalated"))
    return changes


def _duration(state: WorkflowState) -> list[Change]:
    # Called by both ends, so whichever arrives second records the duration once.
    if state.started_at is None or state.ended_at is None or state.ended_type is None:
        return []
    seconds = (state.ended_at - state.started_at).total_seconds()
    hour = hour_of(state.ended_at)
    return [Change(workflow_type=state.ended_type, hour=hour, measure="duration", seconds=seconds)]


def _learn_type(state: WorkflowState, workflow_type: str) -> list[Change]:
    """Remember a workflow's type; its letters counted under unknown move to it."""
    if workflow_type == UNKNOWN_TYPE or state.workflow_type is not None:
        return []
    state.workflow_type = workflow_type
    moves: list[Change] = []
    for letter in state.letters.values():
        if letter.counted_as == UNKNOWN_TYPE:
            letter.counted_as = workflow_type
            moves.append(
                Change(
                    workflow_type=UNKNOWN_TYPE,
                    hour=letter.hour,
                    measure="dead_lettered",
                    label=letter.category,
                    amount=-1,
                )
            )
            moves.append(
                Change(
                    workflow_type=workflow_type,
                    hour=letter.hour,
                    measure="dead_lettered",
                    label=letter.category,
                )
            )
    return moves


@dataclass
class Bucket:
    """The numbers of one workflow type in one hour."""

    started: int = 0
    ended: Counter[str] = field(default_factory=Counter)
    escalated: int = 0
    dead_lettered: Counter[str] = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)
    """Seconds, kept sorted so percentiles are exact."""

    def apply(self, change: Change) -> None:
        if change.measure == "started":
            self.started += change.amount
        elif change.measure == "ended":
            self.ended[change.label] += change.amount
        elif change.measure == "escalated":
            self.escalated += change.amount
        elif change.measure == "dead_lettered":
            self.dead_lettered[change.label] += change.amount
        elif change.seconds is not None:
            bisect.insort(self.durations, change.seconds)

    def is_empty(self) -> bool:
        return not (self.started or +self.ended or self.escalated or +self.dead_lettered or self.durations)

    def to_json(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "ended": dict(+self.ended),
            "escalated": self.escalated,
            "dead_lettered": dict(+self.dead_lettered),
            "durations": self.durations,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Bucket:
        return cls(
            started=data["started"],
            ended=Counter(data["ended"]),
            escalated=data["escalated"],
            dead_lettered=Counter(data["dead_lettered"]),
            durations=list(data["durations"]),
        )


class OutcomeView:
    """The whole view in one process: every workflow's state and every bucket.

    The same :func:`fold` and :class:`Bucket` the faust app runs in its tables, without
    Kafka (the counting rules' tests, and a replica's reference for them). Not
    thread-safe: one task applies events.
    """

    def __init__(self) -> None:
        self.buckets: dict[BucketKey, Bucket] = {}
        self.workflows: dict[str, WorkflowState] = {}
        self.applied = 0
        """Events that changed the view (duplicates and unrelated event types excluded)."""

    async def observe(self, envelope: Envelope, payload: EventModel) -> None:
        self.apply(envelope, payload)

    def apply(self, envelope: Envelope, payload: EventModel) -> bool:
        """Fold one decoded event into the view; returns whether the view changed.

        Event types the view does not count only teach their workflow's type. Idempotent:
        a second delivery of the same fact changes nothing.
        """
        seen = observe(envelope, payload)
        if seen is None:
            return False
        changes = fold(self.workflows.setdefault(seen.key, WorkflowState()), seen)
        for change in changes:
            key = BucketKey(change.workflow_type, change.hour)
            bucket = self.buckets.setdefault(key, Bucket())
            bucket.apply(change)
            if bucket.is_empty():
                del self.buckets[key]
        if changes:
            self.applied += 1
        return bool(changes)

    def rows(self, *, workflow_type: str | None = None, hour: datetime | None = None) -> list[dict[str, Any]]:
        """JSON-ready buckets, oldest hour first, optionally for one type and/or one hour."""
        return bucket_rows(self.buckets.items(), workflow_type=workflow_type, hour=hour)

    def releases(self, *, service: str | None = None) -> list[dict[str, Any]]:
        """JSON-ready numbers per (service, release, workflow type) of the pinned workflows."""
        return release_rows(release_partials(self.workflows.values(), service=service))

    def totals(self) -> dict[str, TypeTotals]:
        """Per workflow type, every hour summed (what the Prometheus endpoint exposes)."""
        return type_totals(self.buckets.items())


def bucket_rows(
    buckets: Iterable[tuple[BucketKey, Bucket]],
    *,
    workflow_type: str | None = None,
    hour: datetime | None = None,
) -> list[dict[str, Any]]:
    """JSON-ready non-empty buckets, oldest hour first, optionally for one type and/or one hour."""
    chosen = sorted(
        (
            (key, bucket)
            for key, bucket in buckets
            if not bucket.is_empty()
            and (workflow_type is None or key.workflow_type == workflow_type)
            and (hour is None or key.hour == hour)
        ),
        key=lambda item: (item[0].hour, item[0].workflow_type),
    )
    return [bucket_row(key, bucket) for key, bucket in chosen]


def type_totals(buckets: Iterable[tuple[BucketKey, Bucket]]) -> dict[str, TypeTotals]:
    by_type: dict[str, list[Bucket]] = {}
    for key, bucket in buckets:
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
    }


ReleaseKey = tuple[str, str, str]
"""(service, release, workflow type)."""


@dataclass
class ReleasePartial:
    """A release's numbers over some of its workflows: partials of disjoint workflows add up."""

    started: int = 0
    ended: Counter[str] = field(default_factory=Counter)
    escalated: int = 0
    dead_lettered: Counter[str] = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)

    def add(self, other: ReleasePartial) -> None:
        self.started += other.started
        self.ended.update(other.ended)
        self.escalated += other.escalated
        self.dead_lettered.update(other.dead_lettered)
        self.durations.extend(other.durations)

    def to_json(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "ended": dict(+self.ended),
            "escalated": self.escalated,
            "dead_lettered": dict(+self.dead_lettered),
            "durations": self.durations,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReleasePartial:
        return cls(
            started=data["started"],
            ended=Counter(data["ended"]),
            escalated=data["escalated"],
            dead_lettered=Counter(data["dead_lettered"]),
            durations=list(data["durations"]),
        )


def release_partials(
    workflows: Iterable[WorkflowState], *, service: str | None = None
) -> dict[ReleaseKey, ReleasePartial]:
    """Per (service, release, type), the numbers of ``workflows`` pinned to that release."""
    partials: dict[ReleaseKey, ReleasePartial] = {}
    for workflow in workflows:
        workflow_type = workflow.workflow_type or UNKNOWN_TYPE
        for pinned_service, release in workflow.pins.items():
            if service is not None and pinned_service != service:
                continue
            partial = partials.setdefault((pinned_service, release, workflow_type), ReleasePartial())
            partial.started += workflow.started_at is not None
            if workflow.outcome is not None:
                partial.ended[workflow.outcome] += 1
            partial.escalated += bool(workflow.escalated)
            # A release answers for its own service's dead letters only.
            partial.dead_lettered.update(
                letter.category for letter in workflow.letters.values() if letter.service == pinned_service
            )
            if workflow.started_at is not None and workflow.ended_at is not None:
                partial.durations.append((workflow.ended_at - workflow.started_at).total_seconds())
    return partials


def release_rows(partials: dict[ReleaseKey, ReleasePartial]) -> list[dict[str, Any]]:
    return [release_row(key, partial) for key, partial in sorted(partials.items())]


def release_row(key: ReleaseKey, partial: ReleasePartial) -> dict[str, Any]:
    service, release, workflow_type = key
    ended = partial.ended
    return {
        "service": service,
        "release": release,
        "workflow_type": workflow_type,
        "started": partial.started,
        "ended": {outcome: ended[outcome] for outcome in OUTCOMES},
        "completion_rate": round(ended["completed"] / sum(ended.values()), 4) if +ended else None,
        "escalated": partial.escalated,
        "dead_lettered": {category: partial.dead_lettered[category] for category in ERROR_CATEGORIES},
        "duration_s": duration_summary(sorted(partial.durations)),
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
