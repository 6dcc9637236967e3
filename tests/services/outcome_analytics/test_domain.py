"""Outcome analytics without Kafka: the view's counting rules, percentiles, and the record step."""

from __future__ import annotations

import base64
import itertools
import json
import random
import statistics
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from chorus.base.clock import ManualClock
from chorus.base.metrics import Metrics
from chorus.contracts.approvals import ApprovalContext, ApprovalRequested, EscalationStep
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.lifecycle import Outcome, SpendRecorded, WorkflowEnded, WorkflowStarted
from chorus.contracts.platform import (
    ErrorCategory,
    EventDeadLettered,
    ReviewRequested,
)
from chorus.contracts.registry import Registry, default_registry
from chorus.kernel.codec import decode, encode
from chorus.kernel.deadletters import dead_letter_envelope
from chorus.kernel.envelopes import child_envelope, start_envelope
from chorus.kernel.records import Record
from chorus.platform.outcome_analytics.bootstrap import analytics_keys
from chorus.platform.outcome_analytics.config import Settings
from chorus.platform.outcome_analytics.domain import (
    Bucket,
    BucketKey,
    Fact,
    MemoryStore,
    OutcomeView,
    fact_of,
    format_hour,
    hour_of,
    parse_hour,
    percentile,
)
from chorus.platform.outcome_analytics.handlers import Deps, on_record
from chorus.privacy.signing import Verifier, load_keys, make_keys
from tests.support.events import dead_lettered
from tests.support.examples import example

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)
GATEWAY = ProducerRef(service="gateway", version="1")
RUNTIME = ProducerRef(service="payment_agent", version="1")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def start(wf: str, wtype: str, when: datetime) -> tuple[Envelope, EventModel]:
    payload = WorkflowStarted(submitted_by="tester", start_event_type="invoice.received")
    return _env(payload, wf, wtype, when), payload


def end(wf: str, wtype: str, when: datetime, outcome: Outcome) -> tuple[Envelope, EventModel]:
    payload = WorkflowEnded(outcome=outcome, ended_by="tester")
    return _env(payload, wf, wtype, when), payload


def approval(wf: str, wtype: str, when: datetime) -> tuple[Envelope, EventModel]:
    payload = ApprovalRequested(
        approval_id=f"ap-{uuid.uuid4().hex[:6]}",
        requested_by="budget_agent",
        chain=[EscalationStep(tier="manager", window_s=3600.0)],
        context=ApprovalContext(summary="over budget"),
    )
    return _env(payload, wf, wtype, when), payload


def review(wf: str, wtype: str, when: datetime) -> tuple[Envelope, EventModel]:
    payload = example(ReviewRequested)  # counted as an escalation whatever it says
    return _env(payload, wf, wtype, when), payload


def dead_letter(
    when: datetime,
    category: ErrorCategory,
    *,
    original_value: bytes,
    key: bytes | None = None,
    original_workflow_id: str | None = None,
    event_id: uuid.UUID | None = None,
) -> tuple[Envelope, EventModel]:
    payload = dead_lettered(
        service="payment_agent",
        topic="procurement.events",
        value=original_value,
        key=key,
        category=category,
        at=when,
        original_workflow_id=original_workflow_id,
    )
    env = _env(payload, f"poison:{uuid.uuid4().hex[:6]}", "unknown", when, event_id=event_id)
    return env, payload


def _env(
    payload: EventModel,
    wf: str,
    wtype: str,
    when: datetime,
    *,
    event_id: uuid.UUID | None = None,
) -> Envelope:
    return start_envelope(
        payload,
        workflow_id=wf,
        workflow_type=wtype,
        producer=GATEWAY,
        now=when,
        idempotency_key=str(uuid.uuid4()),
        event_id=event_id,
    )


def view_of(events: list[tuple[Envelope, EventModel]]) -> OutcomeView:
    view = OutcomeView()
    for envelope, payload in events:
        view.apply(envelope, payload)
    return view


def only(view: OutcomeView, workflow_type: str, hour: datetime) -> dict[str, Any]:
    rows = view.rows(workflow_type=workflow_type, hour=hour_of(hour))
    assert len(rows) == 1, rows
    return rows[0]


# -- hours and percentiles -----------------------------------------------------------------


def test_hours_are_utc_windows_of_the_event_time() -> None:
    local = datetime(2026, 3, 1, 12, 59, 59, 999999, tzinfo=timezone.utc).astimezone(
        ZoneInfo("Europe/Berlin")
    )
    assert hour_of(local) == datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    assert format_hour(hour_of(local)) == "2026-03-01T12:00:00Z"
    assert parse_hour("2026-03-01T12") == datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    assert parse_hour("2026-03-01T12:30:00Z") == datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    assert parse_hour("2026-03-01T14:10:00+02:00") == datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    with pytest.raises(ValueError):
        parse_hour("yesterday")
    with pytest.raises(ValueError):
        hour_of(datetime(2026, 3, 1, 12))  # naive: refused, never guessed


@pytest.mark.parametrize("size", [2, 3, 10, 101, 257])
def test_percentiles_match_the_inclusive_method_of_the_standard_library(size: int) -> None:
    rng = random.Random(size)
    values = sorted(rng.uniform(0, 5000) for _ in range(size))
    expected = statistics.quantiles(values, n=100, method="inclusive")
    for p in (1, 50, 90, 99):
        assert percentile(values, p) == pytest.approx(expected[p - 1], rel=1e-12)
    assert percentile(values, 0) == values[0]
    assert percentile(values, 100) == values[-1]


def test_percentile_of_one_value_is_that_value_and_of_none_is_an_error() -> None:
    assert percentile([42.0], 99) == 42.0
    with pytest.raises(ValueError):
        percentile([], 50)


# -- counting rules --------------------------------------------------------------------------


def test_starts_ends_and_durations_land_in_the_hour_of_their_own_event() -> None:
    view = view_of(
        [
            start("w1", "procurement", at(5)),
            end("w1", "procurement", at(65), "completed"),  # next hour, 3600 s
            start("w2", "procurement", at(10)),
            end("w2", "procurement", at(40), "compensated"),  # same hour, 1800 s
            start("w3", "research", at(20)),
            end("w3", "research", at(21), "failed"),
        ]
    )
    first = only(view, "procurement", at(0))
    assert first["started"] == 2
    assert first["ended"] == {
        "completed": 0,
        "rejected": 0,
        "failed": 0,
        "compensated": 1,
        "timed_out": 0,
        "cancelled": 0,
        "erased": 0,
    }
    assert first["duration_s"] == {"count": 1, "p50": 1800.0, "p90": 1800.0, "p99": 1800.0}
    second = only(view, "procurement", at(60))
    assert second["started"] == 0
    assert second["ended"]["completed"] == 1
    assert second["duration_s"]["p50"] == 3600.0
    research = only(view, "research", at(0))
    assert research["ended"]["failed"] == 1
    assert research["duration_s"]["p99"] == 60.0
    assert [r["hour"] for r in view.rows()] == [
        "2026-03-01T10:00:00Z",
        "2026-03-01T10:00:00Z",
        "2026-03-01T11:00:00Z",
    ]


def test_redelivered_and_republished_events_count_once() -> None:
    started = start("w1", "procurement", at(1))
    ended = end("w1", "procurement", at(2), "completed")
    second_end = end("w1", "procurement", at(3), "failed")  # a second terminal event
    letter = dead_letter(at(4), "persistent", original_value=b"x")
    view = view_of([started, started, ended, ended, second_end, letter, letter])
    row = only(view, "procurement", at(0))
    assert row["started"] == 1
    assert sum(row["ended"].values()) == 1
    assert row["ended"]["completed"] == 1
    assert row["duration_s"]["count"] == 1
    assert only(view, "unknown", at(0))["dead_lettered"]["persistent"] == 1
    assert view.applied == 3


def test_escalations_are_distinct_workflows_per_hour() -> None:
    view = view_of(
        [
            approval("w1", "procurement", at(1)),
            approval("w1", "procurement", at(2)),
            review("w1", "procurement", at(3)),
            review("w2", "procurement", at(4)),
            approval("w1", "procurement", at(61)),  # another hour: counts there too
        ]
    )
    assert only(view, "procurement", at(0))["escalated"] == 2
    assert only(view, "procurement", at(60))["escalated"] == 1


def test_dead_letters_take_the_type_of_the_original_workflow_when_it_is_known() -> None:
    original = start("w-orig", "research", at(0))[0]
    view = view_of(
        [
            start("w-keyed", "procurement", at(0)),
            # 1. the original bytes are an envelope: its workflow type
            dead_letter(at(5), "semantic", original_value=encode(original)),
            # 2. poison bytes, but keyed by a workflow the view knows
            dead_letter(at(6), "decode", original_value=b"\xff", key=b"w-keyed"),
            # 3. poison bytes, original_workflow_id set to a known workflow
            dead_letter(at(7), "transient", original_value=b"{}", original_workflow_id="w-keyed"),
            # 4. nothing to go by
            dead_letter(at(8), "decode", original_value=b"\x00"),
        ]
    )
    assert only(view, "research", at(0))["dead_lettered"]["semantic"] == 1
    procurement = only(view, "procurement", at(0))["dead_lettered"]
    assert (procurement["decode"], procurement["transient"]) == (1, 1)
    assert only(view, "unknown", at(0))["dead_lettered"] == {
        "transient": 0,
        "persistent": 0,
        "semantic": 0,
        "decode": 1,
        "unauthorized": 0,
        "unexpected": 0,
    }


def test_a_dead_letter_read_before_its_workflow_moves_from_unknown_to_the_type() -> None:
    letter = dead_letter(at(30), "persistent", original_value=b"\xff", key=b"w9")
    view = view_of([letter])
    assert only(view, "unknown", at(0))["dead_lettered"]["persistent"] == 1
    view.apply(*start("w9", "procurement", at(2)))
    assert view.rows(workflow_type="unknown") == []  # the emptied bucket is gone
    assert only(view, "procurement", at(0))["dead_lettered"]["persistent"] == 1


def mixed_events() -> list[tuple[Envelope, EventModel]]:
    """Two workflows' starts, ends, a review and dead letters: one keyed by its workflow,
    one naming it, one of poison bytes with no workflow at all."""
    return [
        start("w1", "procurement", at(1)),
        end("w1", "procurement", at(50), "completed"),
        start("w2", "research", at(2)),
        review("w2", "research", at(3)),
        end("w2", "research", at(70), "rejected"),
        dead_letter(at(4), "decode", original_value=b"\xff", key=b"w2"),
        dead_letter(at(5), "persistent", original_value=b"{}", original_workflow_id="w1"),
        dead_letter(at(6), "unexpected", original_value=b"\x00"),
    ]


def test_the_view_is_the_same_whatever_order_the_topics_are_read_in() -> None:
    events = mixed_events()
    expected = view_of(events).rows()
    assert len(expected) == 4
    for order in itertools.islice(itertools.permutations(events), 0, None, 97):
        assert view_of(list(order)).rows() == expected


def test_rows_filter_by_type_and_hour_and_totals_sum_the_hours() -> None:
    view = view_of(
        [
            start("w1", "procurement", at(1)),
            start("w2", "procurement", at(61)),
            end("w1", "procurement", at(62), "timed_out"),
            end("w2", "procurement", at(63), "cancelled"),
            start("w3", "research", at(1)),
        ]
    )
    assert [r["workflow_type"] for r in view.rows(hour=at(0))] == ["procurement", "research"]
    assert [r["hour"] for r in view.rows(workflow_type="procurement")] == [
        "2026-03-01T10:00:00Z",
        "2026-03-01T11:00:00Z",
    ]
    assert view.rows(workflow_type="nope") == []
    totals = view.totals()["procurement"]
    assert totals.started == 2
    assert (totals.ended["timed_out"], totals.ended["cancelled"]) == (1, 1)
    assert totals.durations == [120.0, 3660.0]


# -- one record in (the agent's body, without faust) -----------------------------------------


class RecordingSink:
    def __init__(self) -> None:
        self.published: list[Envelope] = []

    async def publish(self, envelope: Envelope) -> None:
        self.published.append(envelope)


class ViewSink:
    """Facts straight into a view, as the view's agent applies them from its topic."""

    def __init__(self, view: OutcomeView) -> None:
        self.view = view

    async def send(self, fact: Fact) -> None:
        self.view.apply_fact(fact)


class ExplodingView(OutcomeView):
    def apply_fact(self, fact: Fact) -> bool:
        raise RuntimeError("a bug in the view")


@pytest.fixture
def registry() -> Registry:
    return default_registry()


NO_CHECKS = Verifier({}, {})
"""For the counting rules: these records are the view's cases, not forgeries (the
signature check has its own test below)."""


def deps(
    registry: Registry, view: OutcomeView | None = None, verifier: Verifier = NO_CHECKS
) -> tuple[Deps, RecordingSink]:
    sink = RecordingSink()
    return (
        Deps(
            registry=registry,
            verifier=verifier,
            facts=ViewSink(view or OutcomeView()),
            dead_letters=sink,
            metrics=Metrics("outcome_analytics"),
            clock=ManualClock(T0),
            producer=ProducerRef(service="outcome_analytics", version="0.1.0"),
            consumer_group="outcome_analytics.test",
        ),
        sink,
    )


def view_in(d: Deps) -> OutcomeView:
    assert isinstance(d.facts, ViewSink)
    return d.facts.view


def record(
    value: bytes | None,
    *,
    key: bytes | None = b"wf-1",
    offset: int = 3,
    headers: tuple[tuple[str, bytes], ...] = (),
) -> Record:
    return Record(
        topic="workflows.lifecycle",
        partition=2,
        offset=offset,
        key=key,
        value=value,
        headers=(("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"), *headers),
        timestamp_ms=1_700_000_000_000,
    )


async def test_a_poison_record_is_dead_lettered_with_its_bytes_and_position(
    registry: Registry,
) -> None:
    d, sink = deps(registry)
    await on_record(record(b"\x00not json"), d)
    [letter] = sink.published
    body = EventDeadLettered.model_validate(letter.payload)
    assert base64.b64decode(body.original.value_b64) == b"\x00not json"
    assert body.original.key_b64 == base64.b64encode(b"wf-1").decode()
    assert (body.original.topic, body.original.partition, body.original.offset) == (
        "workflows.lifecycle",
        2,
        3,
    )
    assert body.error.category == "decode"
    assert letter.workflow_id == "poison:workflows.lifecycle:2:3"
    assert letter.traceparent.startswith("00-" + "1" * 32)  # same trace as the record
    assert d.positions == {("workflows.lifecycle", 2): 4}
    # The dead letter itself is a valid event of the registry.
    assert decode(encode(letter), registry).event_type == "event.dead_lettered"
    # Rebuilding the view dead-letters the same record again under the same id.
    d2, sink2 = deps(registry)
    await on_record(record(b"\x00not json"), d2)
    assert sink2.published[0].event_id == letter.event_id


async def test_a_failure_inside_the_view_dead_letters_the_decoded_event_as_its_child(
    registry: Registry,
) -> None:
    started, _ = start("wf-7", "procurement", at(1))
    d, sink = deps(registry, ExplodingView())
    await on_record(record(encode(started), key=b"wf-7"), d)
    [letter] = sink.published
    body = EventDeadLettered.model_validate(letter.payload)
    assert body.error.category == "unexpected"
    assert body.error.message == "a bug in the view"
    assert (body.original_event_id, body.original_workflow_id) == (str(started.event_id), "wf-7")
    assert (letter.workflow_id, letter.workflow_type) == ("wf-7", "procurement")
    assert base64.b64decode(body.original.value_b64) == encode(started)


async def test_own_dead_letters_that_fail_are_not_dead_lettered_again(registry: Registry) -> None:
    producer = ProducerRef(service="outcome_analytics", version="0.1.0")
    own = dead_letter_envelope(
        record(b"junk"),
        ValueError("x"),
        "decode",
        producer=producer,
        consumer_group="g",
        now=T0,
        attempts=1,
        failures=[],
        parent=None,
    )
    d, sink = deps(registry, ExplodingView())
    await on_record(record(encode(own), key=own.workflow_id.encode(), offset=9), d)
    assert sink.published == []
    assert d.positions == {("workflows.lifecycle", 2): 10}


async def test_the_view_counts_only_what_the_registry_lets_its_producer_state(
    registry: Registry, tmp_path: Path
) -> None:
    """A procurement's end unsigned in the budget agent's name, or under the report agent's
    own key, is a dead letter ``unauthorized`` and counts for nothing, as in every service
    that reads it; the payment agent's signed end counts."""
    make_keys(tmp_path, registry.signers())
    _, verifier = analytics_keys(Settings(signing_dir=str(tmp_path)), registry)
    d, sink = deps(registry, verifier=verifier)

    def by(service: str, made: tuple[Envelope, EventModel], *, sign: bool = True) -> Record:
        envelope = made[0].model_copy(update={"producer": ProducerRef(service=service, version="1")})
        signer = load_keys(str(tmp_path), service, signs={"*"}, checks={}).signer
        assert signer is not None
        value = encode(envelope)
        return record(value, key=b"wf-9", headers=(signer.header(value),) if sign else ())

    await on_record(by("gateway", start("wf-9", "procurement", at(0))), d)
    await on_record(by("budget_agent", end("wf-9", "procurement", at(5), "compensated"), sign=False), d)
    await on_record(by("report_agent", end("wf-9", "procurement", at(6), "rejected")), d)
    await on_record(by("payment_agent", end("wf-9", "procurement", at(7), "completed")), d)

    row = only(view_in(d), "procurement", at(0))
    assert (row["started"], {o: n for o, n in row["ended"].items() if n}) == (1, {"completed": 1})
    letters = [EventDeadLettered.model_validate(letter.payload) for letter in sink.published]
    assert [letter.error.category for letter in letters] == ["unauthorized", "unauthorized"]
    assert "chorus-signature header" in letters[0].error.message
    assert "not report_agent" in letters[1].error.message


async def test_an_event_the_view_does_not_count_is_read_and_ignored(registry: Registry) -> None:
    decided = json.loads(json.dumps(registry.examples[("approval.decided", 1)][0].body))
    d, sink = deps(registry)
    await on_record(record(json.dumps(decided).encode()), d)
    assert sink.published == []
    assert view_in(d).rows() == []


def test_child_dead_letters_keep_the_workflow_of_their_parent() -> None:
    parent, _ = start("wf-3", "research", at(0))
    payload = dead_letter(at(1), "persistent", original_value=encode(parent))[1]
    child = child_envelope(parent, payload, producer=RUNTIME, now=at(1), position="dl")
    view = OutcomeView()
    view.apply(child, payload)
    assert only(view, "research", at(0))["dead_lettered"]["persistent"] == 1


def test_outcomes_by_release_put_a_canary_beside_its_stable_release_in_any_order() -> None:
    def pinned(wf: str, release: str) -> tuple[Envelope, EventModel]:
        env, payload = start(wf, "procurement", at(0))
        return env.model_copy(update={"pins": {"invoice_agent": release}}), payload

    events = [
        pinned("wf-a", "1.0"),
        end("wf-a", "procurement", at(10), "completed"),
        pinned("wf-b", "2.0"),
        end("wf-b", "procurement", at(30), "completed"),
        pinned("wf-c", "2.0"),
        review("wf-c", "procurement", at(5)),
        end("wf-c", "procurement", at(40), "rejected"),
        start("wf-old", "procurement", at(0)),  # started before pinning: in no release
        end("wf-old", "procurement", at(1), "completed"),
    ]
    orders = [events, list(reversed(events)), random.Random(3).sample(events, len(events))]
    views = []
    for order in orders:
        view = OutcomeView()
        for envelope, payload in order:
            view.apply(envelope, payload)
        views.append(view.releases(service="invoice_agent"))
    assert views[0] == views[1] == views[2]
    stable, canary = views[0]
    assert (stable["release"], stable["started"], stable["ended"]["completed"]) == ("1.0", 1, 1)
    assert (canary["release"], canary["started"], canary["escalated"]) == ("2.0", 2, 1)
    assert canary["ended"]["rejected"] == 1 and canary["completion_rate"] == 0.5
    assert canary["duration_s"]["count"] == 2 and canary["duration_s"]["p50"] == 35 * 60
    assert OutcomeView().releases() == []


class PartitionedStore(MemoryStore):
    """As the faust tables keep it: each bucket in shares, one per partition of the facts
    topic that wrote it (here the workflow's hash over three)."""

    def __init__(self) -> None:
        super().__init__()
        self.partition = 0
        self._shares: dict[tuple[int, BucketKey], Bucket] = {}

    def add(self, key: BucketKey, change: Bucket) -> None:
        self._shares.setdefault((self.partition, key), Bucket()).merge(change)

    def shares(self) -> Iterable[tuple[BucketKey, Bucket]]:
        return [(key, share) for (_, key), share in self._shares.items()]


def test_facts_through_their_topic_in_shares_per_partition_give_the_same_view() -> None:
    """The service's path: each event's fact as JSON on the facts topic, each workflow's on
    one partition, its buckets' shares per partition summed when read; every fact twice
    (at least once delivery). The numbers are those of the plain view."""
    events = [
        *mixed_events(),
        start("w3", "research", at(7)),
        end("w3", "research", at(8), "completed"),
    ]
    store = PartitionedStore()
    view = OutcomeView(store)
    for envelope, payload in [*events, *events]:
        fact = fact_of(envelope, payload)
        assert fact is not None
        store.partition = sum(fact.key.encode()) % 3
        view.apply_fact(Fact.model_validate_json(fact.model_dump_json()))
    assert len({partition for partition, _ in store._shares}) == 3
    assert view.rows() == view_of(events).rows()
    assert view.releases() == view_of(events).releases()


def spent(wf: str, wtype: str, when: datetime, micro_usd: int) -> tuple[Envelope, EventModel]:
    payload = example(SpendRecorded).model_copy(update={"cost_micro_usd": micro_usd})
    return _env(payload, wf, wtype, when), payload


def test_the_cost_per_completed_workflow_counts_each_spend_once_in_any_order() -> None:
    """Two completed tickets (one spends after it ended, one spend read twice) and one
    rejected: the hour they completed in says what the completed ones' models cost, in all
    and per workflow, whatever order the records come in."""
    events = [
        start("t1", "support_ticket", at(0)),
        spent("t1", "support_ticket", at(1), 300),
        end("t1", "support_ticket", at(2), "completed"),
        spent("t1", "support_ticket", at(3), 100),  # a step after the end (its reply)
        start("t2", "support_ticket", at(0)),
        spent("t2", "support_ticket", at(1), 500),
        end("t2", "support_ticket", at(2), "completed"),
        start("t3", "support_ticket", at(0)),
        spent("t3", "support_ticket", at(1), 9000),  # not completed: not in the cost
        end("t3", "support_ticket", at(2), "rejected"),
    ]
    events.append(events[5])  # t2's spend redelivered
    shuffled = events[:]
    random.Random(7).shuffle(shuffled)
    for order in (events, events[::-1], shuffled):
        row = only(view_of(order), "support_ticket", at(2))
        assert row["cost"] == {"completed_usd": 0.0009, "per_completed_usd": 0.00045}, order
    assert only(view_of(events[:3]), "support_ticket", at(2))["cost"]["per_completed_usd"] == 0.0003
    none = view_of([start("t4", "procurement", at(0)), end("t4", "procurement", at(1), "failed")])
    assert only(none, "procurement", at(1))["cost"] == {"completed_usd": 0.0, "per_completed_usd": None}
    assert view_of(events).totals()["support_ticket"].completed_cost == 900
