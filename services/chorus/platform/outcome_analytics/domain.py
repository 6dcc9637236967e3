"""The outcome view: pure aggregation of lifecycle, escalation and dead-letter events.

No I/O, no clock, no Kafka: :meth:`OutcomeView.apply` takes a decoded envelope and
its typed payload and updates per-``(workflow type, hour)`` buckets. Hours are
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
from typing import Any, NamedTuple, get_args
from uuid import UUID

from pydantic import ValidationError

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


class BucketKey(NamedTuple):
    workflow_type: str
    hour: datetime
    """Start of the UTC hour (tz-aware)."""


@dataclass
class Bucket:
    """The numbers of one workflow type in one hour."""

    started: int = 0
    ended: Counter[str] = field(default_factory=Counter)
    escalated: set[str] = field(default_factory=set)
    dead_lettered: Counter[str] = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)
    """Seconds, kept sorted so percentiles are exact."""

    def is_empty(self) -> bool:
        return not (self.started or +self.ended or self.escalated or +self.dead_lettered or self.durations)


@dataclass
class _Workflow:
    started_at: datetime | None = None
    ended_at: datetime | None = None
    ended_in: BucketKey | None = None
    pins: dict[str, str] = field(default_factory=dict)
    """Service -> the release the workflow was pinned to when it started."""
    outcome: str | None = None
    escalated: bool = False
    dead_lettered: dict[str, Counter[str]] = field(default_factory=dict)
    """Dead letters by the service that wrote them, by category."""


@dataclass(frozen=True)
class _PendingDeadLetter:
    hour: datetime
    category: str


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


class OutcomeView:
    """Every bucket of the view, and what is remembered per workflow to keep counts exact.

    Not thread-safe: one task applies events (the faust agent, concurrency 1) and
    readers run on the same event loop.
    """

    def __init__(self) -> None:
        self.buckets: dict[BucketKey, Bucket] = {}
        self.applied = 0
        """Events that changed the view (duplicates and unrelated event types excluded)."""
        self._workflows: dict[str, _Workflow] = {}
        self._types: dict[str, str] = {}
        self._dead_letters: set[UUID] = set()
        self._pending: dict[str, list[_PendingDeadLetter]] = {}

    # -- applying events --------------------------------------------------------------

    def apply(self, envelope: Envelope, payload: EventModel) -> bool:
        """Fold one decoded event into the view; returns whether the view changed.

        Event types the view does not count are ignored (False). Idempotent: a
        second delivery of the same fact changes nothing.
        """
        if isinstance(payload, EventDeadLettered):
            # A dead letter's envelope belongs to the dead letter, not to a workflow
            # (a poison record's is "poison:<topic>:<partition>:<offset>"/unknown).
            changed = self._on_dead_lettered(envelope, payload)
        else:
            # Every other event tells its workflow's type, counted or not.
            changed = self._learn_type(envelope.workflow_id, envelope.workflow_type)
            if isinstance(payload, WorkflowStarted):
                changed = self._on_started(envelope) or changed
            elif isinstance(payload, WorkflowEnded):
                changed = self._on_ended(envelope, payload) or changed
            elif isinstance(payload, ApprovalRequested | ReviewRequested):
                changed = self._on_escalated(envelope) or changed
        if changed:
            self.applied += 1
        return changed

    def _bucket(self, workflow_type: str, hour: datetime) -> Bucket:
        key = BucketKey(workflow_type, hour)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = Bucket()
        return bucket

    def _on_started(self, envelope: Envelope) -> bool:
        workflow = self._workflows.setdefault(envelope.workflow_id, _Workflow())
        if workflow.started_at is not None:
            return False
        workflow.started_at = envelope.occurred_at
        workflow.pins = dict(envelope.pins or {})
        self._bucket(envelope.workflow_type, hour_of(envelope.occurred_at)).started += 1
        self._record_duration(workflow)
        return True

    def _on_ended(self, envelope: Envelope, payload: WorkflowEnded) -> bool:
        workflow = self._workflows.setdefault(envelope.workflow_id, _Workflow())
        if workflow.ended_at is not None:
            return False
        key = BucketKey(envelope.workflow_type, hour_of(envelope.occurred_at))
        workflow.ended_at = envelope.occurred_at
        workflow.ended_in = key
        workflow.outcome = payload.outcome
        self._bucket(*key).ended[payload.outcome] += 1
        self._record_duration(workflow)
        return True

    def _record_duration(self, workflow: _Workflow) -> None:
        # Called by both ends, so whichever arrives second records the duration once.
        if workflow.started_at is None or workflow.ended_at is None or workflow.ended_in is None:
            return
        seconds = (workflow.ended_at - workflow.started_at).total_seconds()
        bisect.insort(self._bucket(*workflow.ended_in).durations, seconds)

    def _on_escalated(self, envelope: Envelope) -> bool:
        bucket = self._bucket(envelope.workflow_type, hour_of(envelope.occurred_at))
        if envelope.workflow_id in bucket.escalated:
            return False
        bucket.escalated.add(envelope.workflow_id)
        self._workflows.setdefault(envelope.workflow_id, _Workflow()).escalated = True
        return True

    def _on_dead_lettered(self, envelope: Envelope, payload: EventDeadLettered) -> bool:
        # Dead letters are counted per event id: the runtime derives it from the cause,
        # so a dead letter republished (a relay retry, a rebuilt view re-dead-lettering
        # the same poison record) carries the id of the first one.
        if envelope.event_id in self._dead_letters:
            return False
        self._dead_letters.add(envelope.event_id)
        hour = hour_of(envelope.occurred_at)
        category = payload.error.category
        # The original record is personal data, sealed: this view counts without reading it
        # (the letter names the workflow it belongs to; a poison record's has none).
        sealed = is_sealed(payload.original)
        original = None if sealed else _original_envelope(payload.original.value_b64)
        if original is not None:
            self._learn_type(original.workflow_id, original.workflow_type)
        workflow_id = payload.original_workflow_id or (
            original.workflow_id
            if original is not None
            else (None if sealed else _key_text(payload.original.key_b64))
        )
        if workflow_id:
            letters = self._workflows.setdefault(workflow_id, _Workflow()).dead_lettered
            letters.setdefault(payload.service, Counter())[category] += 1
        workflow_type = self._types.get(workflow_id) if workflow_id else None
        if workflow_type is None:
            workflow_type = UNKNOWN_TYPE
            if workflow_id:
                # Attributed to "unknown" for now; moved when an event of that workflow
                # tells its type (see _learn_type).
                self._pending.setdefault(workflow_id, []).append(_PendingDeadLetter(hour, category))
        self._bucket(workflow_type, hour).dead_lettered[category] += 1
        return True

    def _learn_type(self, workflow_id: str, workflow_type: str) -> bool:
        """Remember a workflow's type; returns whether pending dead letters moved to it."""
        if workflow_type == UNKNOWN_TYPE or workflow_id in self._types:
            return False
        self._types[workflow_id] = workflow_type
        pending_letters = self._pending.pop(workflow_id, [])
        for pending in pending_letters:
            unknown_key = BucketKey(UNKNOWN_TYPE, pending.hour)
            unknown = self.buckets[unknown_key]
            unknown.dead_lettered[pending.category] -= 1
            if unknown.is_empty():
                del self.buckets[unknown_key]
            self._bucket(workflow_type, pending.hour).dead_lettered[pending.category] += 1
        return bool(pending_letters)

    # -- reading ------------------------------------------------------------------------

    def rows(self, *, workflow_type: str | None = None, hour: datetime | None = None) -> list[dict[str, Any]]:
        """JSON-ready buckets, oldest hour first, optionally for one type and/or one hour."""
        keys = sorted(
            (
                key
                for key in self.buckets
                if (workflow_type is None or key.workflow_type == workflow_type)
                and (hour is None or key.hour == hour)
            ),
            key=lambda key: (key.hour, key.workflow_type),
        )
        return [bucket_row(key, self.buckets[key]) for key in keys]

    def releases(self, *, service: str | None = None) -> list[dict[str, Any]]:
        """JSON-ready numbers per (service, release, workflow type) of the pinned workflows."""
        groups: dict[tuple[str, str, str], list[_Workflow]] = {}
        for workflow_id, workflow in self._workflows.items():
            workflow_type = self._types.get(workflow_id, UNKNOWN_TYPE)
            for pinned_service, release in workflow.pins.items():
                if service is None or pinned_service == service:
                    groups.setdefault((pinned_service, release, workflow_type), []).append(workflow)
        return [release_row(key, workflows) for key, workflows in sorted(groups.items())]

    def totals(self) -> dict[str, TypeTotals]:
        """Per workflow type, every hour summed (what the Prometheus endpoint exposes)."""
        by_type: dict[str, list[Bucket]] = {}
        for key, bucket in self.buckets.items():
            by_type.setdefault(key.workflow_type, []).append(bucket)
        return {wt: TypeTotals.of(buckets) for wt, buckets in sorted(by_type.items())}


def bucket_row(key: BucketKey, bucket: Bucket) -> dict[str, Any]:
    return {
        "workflow_type": key.workflow_type,
        "hour": format_hour(key.hour),
        "started": bucket.started,
        "ended": {outcome: bucket.ended[outcome] for outcome in OUTCOMES},
        "escalated": len(bucket.escalated),
        "dead_lettered": {category: bucket.dead_lettered[category] for category in ERROR_CATEGORIES},
        "duration_s": duration_summary(bucket.durations),
    }


def release_row(key: tuple[str, str, str], workflows: list[_Workflow]) -> dict[str, Any]:
    service, release, workflow_type = key
    ended = Counter(w.outcome for w in workflows if w.outcome is not None)
    dead: Counter[str] = Counter()
    for workflow in workflows:  # a release answers for its own service's dead letters only
        dead.update(workflow.dead_lettered.get(service, Counter()))
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
        "escalated": sum(1 for w in workflows if w.escalated),
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
            escalated=sum(len(b.escalated) for b in buckets),
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
