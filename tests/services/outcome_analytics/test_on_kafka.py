"""Outcome analytics as its own process (``python -m chorus.platform.outcome_analytics``) on real Kafka.

A synthetic stream with known numbers goes to an isolated copy of the registry;
the expected per-hour buckets are computed here from the plan (percentiles with
:func:`statistics.quantiles`, not the service's code). The view must equal them
exactly once the service has read every record of its input topics.
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest
from aiokafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from chorus.contracts.approvals import ApprovalContext, ApprovalRequested, EscalationStep
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.lifecycle import Outcome, WorkflowEnded, WorkflowStarted
from chorus.contracts.platform import (
    ErrorCategory,
    ReviewRequested,
)
from chorus.contracts.registry import Registry, default_registry
from chorus.kernel.codec import encode
from chorus.kernel.envelopes import child_envelope, start_envelope, system_envelope
from chorus.kernel.kafka import make_consumer
from chorus.web.apikeys import bearer
from tests.support.events import dead_lettered
from tests.support.kafka import events_of, publish, publish_with_raw_header_key, read_topic
from tests.support.processes import ServiceProcess
from tests.support.registry import isolated_registry
from tests.support.sealed import opened

pytestmark = pytest.mark.integration

H0 = datetime(2026, 2, 1, 8, tzinfo=timezone.utc)
H1 = H0 + timedelta(hours=1)
GATEWAY = ProducerRef(service="gateway", version="1")
AGENT = ProducerRef(service="invoice_agent", version="1")
OUTCOMES: tuple[str, ...] = get_args(Outcome)
CATEGORIES: tuple[str, ...] = get_args(ErrorCategory)
# Cycled over each type's workflows: every outcome occurs, and some never end.
OUTCOME_CYCLE: list[Outcome | None] = [
    "completed",
    "compensated",
    "erased",
    "failed",
    "rejected",
    None,
    "timed_out",
    "completed",
    "compensated",
    "cancelled",
]
RUNTIME_CATEGORIES: list[ErrorCategory] = ["persistent", "transient", "semantic", "unexpected"]


@dataclass
class Planned:
    """One synthetic workflow and everything that happens to it."""

    workflow_id: str
    workflow_type: str
    started_at: datetime
    outcome: Outcome | None
    duration_s: int | None
    approval: bool
    review: bool
    dead_letters: list[tuple[ErrorCategory, bool]] = field(default_factory=list)
    """(category, original is poison bytes keyed by the workflow id)."""

    @property
    def ended_at(self) -> datetime | None:
        if self.duration_s is None:
            return None
        return self.started_at + timedelta(seconds=self.duration_s)


ENDINGS = default_registry().endings()


def ender(workflow_type: str, outcome: Outcome) -> str | None:
    """Who may end a workflow of this type so (workflows.yaml ended_by; any signer of
    workflow.ended for a type it does not declare), None when nobody may: the view counts
    only ends their producer may state, as every service that reads them."""
    allowed = ENDINGS.get(workflow_type)
    if allowed is None:
        return AGENT.service
    return min(allowed.get(outcome, ()), default=None)


def plan(unique: str) -> list[Planned]:
    """Two types x two hours; all times fixed, so the expected numbers are too."""
    plans: list[Planned] = []
    started_per_hour = {"procurement": (9, 7), "research": (6, 8)}
    for workflow_type, counts in started_per_hour.items():
        index = 0
        for hour_index, count in enumerate(counts):
            for n in range(count):
                hour = H0 + timedelta(hours=hour_index)
                started_at = hour + timedelta(minutes=(n * 7) % 30, seconds=(n * 13) % 60)
                outcome = OUTCOME_CYCLE[index % len(OUTCOME_CYCLE)]
                if outcome is not None and ender(workflow_type, outcome) is None:
                    outcome = None  # a procurement never "fails": it is rejected or compensated
                # Hour-0 workflows may end in hour 1 (up to ~58 min); hour-1 ones stay in it.
                longest = 3500 if hour_index == 0 else 1700
                duration = 45 + (index * 397) % longest if outcome else None
                item = Planned(
                    workflow_id=f"wf-{workflow_type[:3]}-{hour_index}-{n}-{unique}",
                    workflow_type=workflow_type,
                    started_at=started_at,
                    outcome=outcome,
                    duration_s=duration,
                    approval=index % 3 == 0,
                    review=index % 4 == 0,
                )
                if index % 5 == 1:
                    item.dead_letters.append(
                        (RUNTIME_CATEGORIES[(index // 5) % len(RUNTIME_CATEGORIES)], False)
                    )
                if index % 7 == 3:
                    item.dead_letters.append(("decode", True))
                plans.append(item)
                index += 1
    return plans


ORPHAN_DEAD_LETTERS = [H0 + timedelta(minutes=10), H1 + timedelta(minutes=10)]
"""Dead letters of poison records with no key: their workflow type cannot be known."""


# -- the expected view, computed independently ----------------------------------------------


def hour(moment: datetime) -> str:
    return moment.replace(minute=0, second=0, microsecond=0).strftime("%Y-%m-%dT%H:00:00Z")


def expected_rows(plans: Sequence[Planned]) -> dict[tuple[str, str], dict[str, Any]]:
    started: Counter[tuple[str, str]] = Counter()
    ended: dict[tuple[str, str], Counter[str]] = {}
    escalated: dict[tuple[str, str], set[str]] = {}
    dead: dict[tuple[str, str], Counter[str]] = {}
    durations: dict[tuple[str, str], list[float]] = {}
    for p in plans:
        started[(p.workflow_type, hour(p.started_at))] += 1
        if p.ended_at is not None and p.outcome is not None and p.duration_s is not None:
            key = (p.workflow_type, hour(p.ended_at))
            ended.setdefault(key, Counter())[p.outcome] += 1
            durations.setdefault(key, []).append(float(p.duration_s))
        if p.approval or p.review:
            escalated.setdefault((p.workflow_type, hour(p.started_at)), set()).add(p.workflow_id)
        for category, _ in p.dead_letters:
            dead.setdefault((p.workflow_type, hour(dead_letter_time(p))), Counter())[category] += 1
    for moment in ORPHAN_DEAD_LETTERS:
        dead.setdefault(("unknown", hour(moment)), Counter())["decode"] += 1
    keys = set(started) | set(ended) | set(escalated) | set(dead)
    rows = {}
    for key in keys:
        values = sorted(durations.get(key, []))
        rows[key] = {
            "workflow_type": key[0],
            "hour": key[1],
            "started": started[key],
            "ended": {o: ended.get(key, Counter())[o] for o in OUTCOMES},
            "escalated": len(escalated.get(key, set())),
            "dead_lettered": {c: dead.get(key, Counter())[c] for c in CATEGORIES},
            "duration_s": independent_percentiles(values),
            # No model spent anything in this stream: nothing per completed workflow, if any.
            "cost": {
                "completed_usd": 0.0,
                "per_completed_usd": 0.0 if ended.get(key, Counter())["completed"] else None,
            },
        }
    return rows


def independent_percentiles(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0, "p50": None, "p90": None, "p99": None}
    if len(values) == 1:
        return {"count": 1, "p50": values[0], "p90": values[0], "p99": values[0]}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"count": len(values), "p50": cuts[49], "p90": cuts[89], "p99": cuts[98]}


def dead_letter_time(p: Planned) -> datetime:
    return p.started_at + timedelta(minutes=2)


# -- the stream, as the services would have written it ---------------------------------------


@dataclass
class Stream:
    """Envelopes or raw bytes per topic, split into before and after the service starts."""

    before: dict[str, list[Envelope]] = field(default_factory=dict)
    after: dict[str, list[Envelope]] = field(default_factory=dict)

    def add(self, topic: str, envelope: Envelope) -> None:
        target = self.before if envelope.occurred_at < H1 else self.after
        target.setdefault(topic, []).append(envelope)


def build_stream(registry: Registry, plans: Iterable[Planned]) -> Stream:
    lifecycle = registry.physical_topic("workflow.started")
    approvals = registry.physical_topic("approval.requested")
    reviews = registry.physical_topic("review.requested")
    deadletters = registry.physical_topic("event.dead_lettered")
    stream = Stream()
    for p in plans:
        started = start_envelope(
            WorkflowStarted(submitted_by="analyst", start_event_type="invoice.received"),
            workflow_id=p.workflow_id,
            workflow_type=p.workflow_type,
            producer=GATEWAY,
            now=p.started_at,
            idempotency_key=f"start-{p.workflow_id}",
        )
        stream.add(lifecycle, started)
        one_minute_in = p.started_at + timedelta(minutes=1)
        if p.approval:
            asked = child(started, approval_requested(), one_minute_in, "approval", by="budget_agent")
            stream.add(approvals, asked)
        if p.review:
            stream.add(reviews, child(started, review_requested(started), one_minute_in, "review"))
        for i, (category, poison) in enumerate(p.dead_letters):
            when = dead_letter_time(p)
            if poison:
                letter = orphan_letter(when, category, key=p.workflow_id.encode(), n=i)
            else:
                letter = runtime_letter(started, category, when)
            stream.add(deadletters, letter)
        if p.outcome is not None and p.ended_at is not None:
            by = ender(p.workflow_type, p.outcome)
            assert by is not None  # the plan has no end nobody may state
            ended = WorkflowEnded(outcome=p.outcome, ended_by=by)
            stream.add(lifecycle, child(started, ended, p.ended_at, "end", by=by))
    for n, when in enumerate(ORPHAN_DEAD_LETTERS):
        stream.add(deadletters, orphan_letter(when, "decode", key=None, n=100 + n))
    return stream


def child(
    parent: Envelope, event: EventModel, now: datetime, position: str, *, by: str = AGENT.service
) -> Envelope:
    """``event`` stated by ``by`` (``publish`` signs it with that service's local key)."""
    producer = ProducerRef(service=by, version="1")
    return child_envelope(parent, event, producer=producer, now=now, position=position)


def approval_requested() -> ApprovalRequested:
    return ApprovalRequested(
        approval_id=f"ap-{uuid.uuid4().hex[:8]}",
        requested_by="budget_agent",
        chain=[EscalationStep(tier="manager", window_s=3600.0)],
        context=ApprovalContext(summary="over the cost center's budget"),
    )


def review_requested(parent: Envelope) -> ReviewRequested:
    return ReviewRequested(
        service="invoice_agent",
        reason="extraction failed validation 3 times",
        validation_errors=["/invoice_number: missing"],
        attempts=3,
        original_event_type=parent.event_type,
        original_event_id=str(parent.event_id),
    )


def runtime_letter(parent: Envelope, category: ErrorCategory, now: datetime) -> Envelope:
    """What the runtime publishes when a handler of ``parent`` fails for good."""
    body = dead_lettered(
        service="invoice_agent",
        topic="workflows.lifecycle",
        offset=1,
        value=encode(parent),
        key=parent.workflow_id.encode(),
        category=category,
        at=now,
        attempts=3,
        original_event_type=parent.event_type,
        original_event_id=str(parent.event_id),
        original_workflow_id=parent.workflow_id,
    )
    return child_envelope(parent, body, producer=AGENT, now=now, position=f"dl/{category}")


def orphan_letter(now: datetime, category: ErrorCategory, *, key: bytes | None, n: int) -> Envelope:
    """What the runtime publishes for a record that did not even decode."""
    body = dead_lettered(
        service="invoice_agent",
        topic="procurement.events",
        partition=1,
        offset=n,
        value=b"\x00\x01 not an event",
        key=key,
        category=category,
        at=now,
        error_class="NotJSONError",
        message="not JSON",
    )
    return system_envelope(
        body,
        producer=AGENT,
        now=now,
        event_id=uuid.uuid4(),
        workflow_id=f"poison:procurement.events:1:{n}",
    )


# -- helpers ----------------------------------------------------------------------------------


def analytics_process(
    registry: Registry, bootstrap: str, tmp: Path, unique: str, *, name: str | None = None, standbys: int = 0
) -> ServiceProcess:
    return ServiceProcess(
        "outcome_analytics",
        {
            "CHORUS_SCHEMAS_DIR": str(registry.root),
            "CHORUS_KAFKA_BOOTSTRAP": bootstrap,
            "CHORUS_GROUP_ID": f"outcome_analytics.t{unique}",
            "CHORUS_STANDBY_REPLICAS": str(standbys),
        },
        tmp,
        name=name,
    )


async def end_offsets(bootstrap: str, topics: Sequence[str]) -> dict[str, int]:
    """``"topic:partition"`` -> end offset, for every non-empty partition of ``topics``."""
    # Subscribed (without a group), so that start() loads these topics' metadata.
    consumer = make_consumer(bootstrap, *topics, group_id=None)
    await consumer.start()
    try:
        partitions = [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        assert partitions, f"no partitions for {topics}"
        ends = await consumer.end_offsets(partitions)
        return {f"{tp.topic}:{tp.partition}": offset for tp, offset in ends.items() if offset}
    finally:
        await consumer.stop()


async def committed_offsets(bootstrap: str, group: str, ends: dict[str, int]) -> dict[str, int]:
    """``"topic:partition"`` -> the offset ``group`` has committed there (0 when none)."""
    consumer = make_consumer(bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        out = {}
        for key in ends:
            topic, partition = key.rsplit(":", 1)
            out[key] = await consumer.committed(TopicPartition(topic, int(partition))) or 0
        return out
    finally:
        await consumer.stop()


async def wait_caught_up(service: ServiceProcess, bootstrap: str, timeout_s: float = 60.0) -> dict[str, int]:
    """Until the service's group has committed every record now on its input topics and
    on its own facts topic; returns those committed offsets."""

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    behind: dict[str, tuple[int, int]] = {}
    while loop.time() < deadline:
        health = await get_json(f"{service.url}/health")
        ends = await end_offsets(bootstrap, [*health["topics"], health["facts_topic"]])
        committed = await committed_offsets(bootstrap, health["group"], ends)
        behind = {tp: (committed[tp], end) for tp, end in ends.items() if committed[tp] < end}
        if not behind:
            return committed
        await asyncio.sleep(0.3)
    raise AssertionError(
        f"view not caught up after {timeout_s}s: (committed, end) {behind}\n{service.tail()}"
    )


async def get_json(url: str) -> Any:
    async with httpx.AsyncClient(timeout=5.0, headers=bearer("demo-auditor-key")) as client:
        response = await client.get(url)
        response.raise_for_status()
        return response.json()


def assert_rows_equal(actual: list[dict[str, Any]], expected: dict[tuple[str, str], dict[str, Any]]) -> None:
    by_key = {(row["workflow_type"], row["hour"]): row for row in actual}
    assert sorted(by_key) == sorted(expected)
    for key, row in expected.items():
        got = dict(by_key[key])
        got_durations = got.pop("duration_s")
        want = dict(row)
        want_durations = want.pop("duration_s")
        assert got == want, key
        assert got_durations["count"] == want_durations["count"], key
        for p in ("p50", "p90", "p99"):
            if want_durations[p] is None:
                assert got_durations[p] is None, key
            else:
                assert got_durations[p] == pytest.approx(want_durations[p], rel=1e-9), (key, p)


def logged_errors(service: ServiceProcess) -> list[str]:
    """Error-level lines of the service's JSON log (a crashed faust agent logs one)."""
    lines = service.log_path.read_text(errors="replace").splitlines()
    errors = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the process runner's own markers
        if isinstance(entry, dict) and entry.get("level") in {"error", "critical"}:
            errors.append(line[:400])
    return errors


async def publish_all(bootstrap: str, batches: dict[str, list[Envelope]]) -> None:
    await asyncio.gather(*(publish(bootstrap, topic, envs) for topic, envs in batches.items()))


async def a_restart_resumes(
    service: ServiceProcess,
    registry: Registry,
    bootstrap: str,
    expected: dict[tuple[str, str], dict[str, Any]],
    unique: str,
) -> None:
    """Stop ``service``, publish one start, start it again: it reads only that start (and at
    most the few records faust had not committed) and serves the whole view, ``expected``
    plus that start: the group's committed offsets and the tables' changelogs carry it over.
    """
    assert await service.terminate() == 0  # SIGTERM: a clean stop
    late = start_envelope(
        WorkflowStarted(submitted_by="analyst", start_event_type="invoice.received"),
        workflow_id=f"wf-late-{unique}",
        workflow_type="procurement",
        producer=GATEWAY,
        now=H1 + timedelta(minutes=40),
        idempotency_key=f"start-late-{unique}",
    )
    await publish(bootstrap, registry.physical_topic("workflow.started"), [late])
    service.start()
    await service.wait_healthy()
    committed = await wait_caught_up(service, bootstrap)
    health = await get_json(f"{service.url}/health")
    # faust commits on a timer and on a clean stop; at least once, so a record read
    # just before the stop may come again (the fold counts it once).
    assert 1 <= health["read"] <= 3, health
    expected[("procurement", hour(H1))]["started"] += 1
    body = await get_json(f"{service.url}/analytics/outcomes")
    assert_rows_equal(body["buckets"], expected)
    history = sum(offset for tp, offset in committed.items() if not tp.startswith(health["facts_topic"]))
    assert history > 80  # all on the inputs, of which it read at most 3 again


def plan_covers_every_case(expected: dict[tuple[str, str], dict[str, Any]]) -> None:
    """The plan exercises what it claims to (a wrong plan would make a weak test)."""
    totals = Counter[str]()
    for row in expected.values():
        totals.update(row["ended"])
        totals["started"] += row["started"]
        totals["escalated"] += row["escalated"]
        totals["dead_lettered"] += sum(row["dead_lettered"].values())
    assert totals["started"] == 30
    assert min(totals[o] for o in OUTCOMES) >= 1
    assert totals["compensated"] >= 4 and totals["failed"] >= 2
    assert ("unknown", hour(H0)) in expected and ("unknown", hour(H1)) in expected
    assert len({key[1] for key in expected}) == 2  # two hours, two types


async def known_stream(
    tmp: Path, unique: str, bootstrap: str
) -> tuple[Registry, list[Planned], dict[tuple[str, str], dict[str, Any]], Stream]:
    """A registry of the test's own topics, the plan, the rows it must give, its records."""
    registry = await isolated_registry(tmp, unique, bootstrap)
    plans = plan(unique)
    return registry, plans, expected_rows(plans), build_stream(registry, plans)


# -- tests ------------------------------------------------------------------------------------


async def test_the_view_equals_the_numbers_of_a_known_stream(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    registry, plans, expected, stream = await known_stream(tmp_path, unique, kafka_bootstrap)
    plan_covers_every_case(expected)
    # Hour 0 is on the topics before the service starts (the rebuild path) ...
    await publish_all(kafka_bootstrap, stream.before)
    service = analytics_process(registry, kafka_bootstrap, tmp_path, unique)
    with service:
        service.start()
        await service.wait_healthy()
        # ... hour 1 arrives while it runs (the live path).
        await publish_all(kafka_bootstrap, stream.after)
        await wait_caught_up(service, kafka_bootstrap)

        body = await get_json(f"{service.url}/analytics/outcomes")
        assert_rows_equal(body["buckets"], expected)

        one = await get_json(
            f"{service.url}/analytics/outcomes?workflow_type=research&hour=2026-02-01T09:30:00Z"
        )
        assert_rows_equal(one["buckets"], {("research", hour(H1)): expected[("research", hour(H1))]})

        async with httpx.AsyncClient(timeout=5.0) as client:
            metrics_text = (await client.get(f"{service.url}/metrics")).text
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(metrics_text)
            for s in family.samples
        }
        for workflow_type in ("procurement", "research"):
            rows = [r for (t, _), r in expected.items() if t == workflow_type]
            labels = (("workflow_type", workflow_type),)
            assert samples[("chorus_analytics_workflows_started", labels)] == sum(r["started"] for r in rows)
            compensated = (("outcome", "compensated"), ("workflow_type", workflow_type))
            assert samples[("chorus_analytics_workflows_ended", compensated)] == sum(
                r["ended"]["compensated"] for r in rows
            )
            all_durations = sorted(
                float(p.duration_s)
                for p in plans
                if p.workflow_type == workflow_type and p.duration_s is not None
            )
            assert samples[("chorus_analytics_workflow_duration_seconds_count", labels)] == len(all_durations)
            p99 = (("quantile", "0.99"), ("workflow_type", workflow_type))
            assert samples[("chorus_analytics_workflow_duration_seconds", p99)] == pytest.approx(
                statistics.quantiles(all_durations, n=100, method="inclusive")[98], rel=1e-9
            )
        unknown_decode = (("category", "decode"), ("workflow_type", "unknown"))
        assert samples[("chorus_analytics_dead_letters", unknown_decode)] == 2

        async with httpx.AsyncClient(timeout=5.0) as client:
            bad = await client.get(
                f"{service.url}/analytics/outcomes?hour=noon", headers=bearer("demo-auditor-key")
            )
            beyond = await client.get(
                f"{service.url}/analytics/outcomes",
                params={"hour": "9999-12-31T23:30:00-01:00"},  # after the year 9999 in UTC
                headers=bearer("demo-auditor-key"),
            )
            keyless = await client.get(f"{service.url}/analytics/outcomes")
            unknown = await client.get(f"{service.url}/analytics/outcomes", headers=bearer("guessed"))
        assert bad.status_code == 400 and bad.json()["parameter"] == "hour" and "noon" in bad.json()["detail"]
        assert beyond.status_code == 400 and beyond.json()["parameter"] == "hour"
        # Any known key reads the counts; without one there is nothing to read.
        assert (keyless.status_code, unknown.status_code) == (401, 401)
        assert "buckets" not in keyless.text

        await a_restart_resumes(service, registry, kafka_bootstrap, expected, unique)
        assert await service.terminate() == 0
        assert logged_errors(service) == []


async def letters_by_original(bootstrap: str, topic: str, count: int) -> dict[bytes, dict[str, Any]]:
    """The first ``count`` dead letters on ``topic``, by their original record's bytes."""
    records = await read_topic(
        bootstrap, [topic], until=lambda rs: len(events_of(rs, "event.dead_lettered")) >= count
    )
    return {
        base64.b64decode(opened(d["payload"]["original"])["value_b64"]): d
        for d in events_of(records, "event.dead_lettered")
    }


def poisons(started: Envelope, now: datetime, unique: str) -> tuple[bytes, bytes, bytes, bytes]:
    """Records of ``started``'s workflow that no consumer may count: not JSON, an outcome no
    schema has, a valid end sent with a header key that is not UTF-8 (which used to stop
    faust's consumer inside aiokafka, before any of our code saw it), and a forgery: the
    budget agent's name on an end it never signed."""
    not_json = b"\x00\xffnot json at all" + unique.encode()
    bad_payload = encode(child(started, WorkflowEnded(outcome="failed", ended_by="x"), now, "bad"))
    bad_payload = bad_payload.replace(b'"outcome":"failed"', b'"outcome":"exploded"')
    assert b"exploded" in bad_payload
    bad_header = encode(child(started, WorkflowEnded(outcome="failed", ended_by="x"), now, "header"))
    forged = child(
        started, WorkflowEnded(outcome="compensated", ended_by="x"), now, "forged", by="budget_agent"
    )
    return not_json, bad_payload, bad_header, encode(forged)


async def test_a_poison_record_is_dead_lettered_with_its_bytes_and_the_view_keeps_going(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    lifecycle = registry.physical_topic("workflow.started")
    deadletters = registry.physical_topic("event.dead_lettered")
    workflow_id = f"wf-poisoned-{unique}"
    now = datetime.now(timezone.utc)
    started = start_envelope(
        WorkflowStarted(submitted_by="analyst", start_event_type="invoice.received"),
        workflow_id=workflow_id,
        workflow_type="procurement",
        producer=GATEWAY,
        now=now,
        idempotency_key=f"start-{workflow_id}",
    )
    ended = child(started, WorkflowEnded(outcome="completed", ended_by="x"), now, "end", by="payment_agent")
    not_json, bad_payload, bad_header, forged = poisons(started, now, unique)

    service = analytics_process(registry, kafka_bootstrap, tmp_path, unique)
    with service:
        service.start()
        await service.wait_healthy()
        # Same key, so one partition: the poison sits between the start and the end.
        key = workflow_id.encode()
        await publish(kafka_bootstrap, lifecycle, [started])
        await publish(kafka_bootstrap, lifecycle, [not_json, bad_payload], key=key)
        await publish_with_raw_header_key(
            kafka_bootstrap, lifecycle, bad_header, key=key, header_key=b"\xc3("
        )
        await publish(kafka_bootstrap, lifecycle, [forged], key=key)
        await publish(kafka_bootstrap, lifecycle, [ended])

        letters = await letters_by_original(kafka_bootstrap, deadletters, 4)
        # The original bytes, exactly.
        assert set(letters) == {not_json, bad_payload, bad_header, forged}
        assert letters.pop(forged)["payload"]["error"]["category"] == "unauthorized"
        inputs = await read_topic(kafka_bootstrap, [lifecycle], until=lambda rs: len(rs) >= 6)
        poison = next(r for r in inputs if r.value == not_json)
        original = opened(letters[not_json]["payload"]["original"])
        assert (original["topic"], original["partition"], original["offset"]) == (
            lifecycle,
            poison.partition,
            poison.offset,
        )
        assert base64.b64decode(original["key_b64"]) == key
        for letter in letters.values():
            assert letter["producer"]["service"] == "outcome_analytics"
            assert letter["payload"]["error"]["category"] == "decode"
        assert letters[bad_payload]["payload"]["error"]["pointer"] == "/payload/outcome"
        assert letters[bad_header]["payload"]["error"]["pointer"] == "/headers"

        await wait_caught_up(service, kafka_bootstrap)
        rows = (await get_json(f"{service.url}/analytics/outcomes"))["buckets"]
        # Dead letters fall in the hour the service dead-lettered them (its clock), which
        # may be the hour after ``now``: sum over rows rather than assume one.
        assert {row["workflow_type"] for row in rows} == {"procurement"}
        assert sum(row["started"] for row in rows) == 1
        # The end after the poison was counted: the agent kept going on that partition.
        # The forged end was not.
        assert sum(row["ended"]["completed"] for row in rows) == 1
        assert sum(sum(row["ended"].values()) for row in rows) == 1
        assert sum(row["duration_s"]["count"] for row in rows) == 1
        # Its own four dead letters are read back and, the original keyed by the
        # workflow, counted under its type; nothing else is.
        counted = [sum(row["dead_lettered"][c] for row in rows) for c in ("decode", "unauthorized")]
        assert counted == [3, 1]
        assert sum(sum(row["dead_lettered"].values()) for row in rows) == 4

        # A restart resumes where the group committed: the poison records are not read,
        # nor dead-lettered, again, and the view is the one its tables kept.
        assert await service.terminate() == 0
        service.start()
        await service.wait_healthy()
        await wait_caught_up(service, kafka_bootstrap)
        assert (await get_json(f"{service.url}/analytics/outcomes"))["buckets"] == rows
        assert (await get_json(f"{service.url}/health"))["read"] <= 3
        again = await read_topic(kafka_bootstrap, [deadletters], until=lambda rs: len(rs) >= 4)
        assert len(again) == 4
        assert await service.terminate() == 0
        # Caught inside the agent, not survived by faust restarting a crashed one.
        assert logged_errors(service) == []


async def wait_split(
    replicas: Sequence[ServiceProcess], partitions: int, timeout_s: float = 60.0
) -> list[list[int]]:
    """Until every replica serves and owns some of the view's partitions, together all."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    owned: list[list[int]] = []
    while loop.time() < deadline:
        healths = [await get_json(f"{r.url}/health") for r in replicas]
        owned = [h["view_partitions"] for h in healths]
        if all(h["status"] == "ok" for h in healths) and sorted(p for ps in owned for p in ps) == list(
            range(partitions)
        ):
            return owned
        await asyncio.sleep(0.3)
    raise AssertionError(f"partitions not split after {timeout_s}s: {owned}")


async def wait_rows(service: ServiceProcess, expected: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Until the service's rows are ``expected`` (a standby copy trails its changelog)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30.0
    while True:
        rows = (await get_json(f"{service.url}/analytics/outcomes"))["buckets"]
        try:
            assert_rows_equal(rows, expected)
            return
        except AssertionError:
            if loop.time() > deadline:
                raise
        await asyncio.sleep(0.3)


async def test_two_replicas_split_the_partitions_and_each_answers_for_the_whole_view(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    registry, _, expected, stream = await known_stream(tmp_path, unique, kafka_bootstrap)
    await publish_all(kafka_bootstrap, stream.before)
    # One standby each: every replica keeps a copy of the partitions the other owns.
    first, second = (
        analytics_process(registry, kafka_bootstrap, tmp_path, unique, name=f"analytics-{n}", standbys=1)
        for n in (1, 2)
    )
    with first, second:
        first.start()
        await first.wait_healthy()
        second.start()
        await second.wait_healthy()
        await publish_all(kafka_bootstrap, stream.after)
        owned = await wait_split([first, second], partitions=6)
        assert all(owned) and not set(owned[0]) & set(owned[1]), owned
        await wait_caught_up(first, kafka_bootstrap)
        for replica in (first, second):
            await wait_rows(replica, expected)
        # The intake's share follows the inputs' partitions (one each here, so
        # faust gives them to one replica); between them, every record was read.
        healths = [await get_json(f"{r.url}/health") for r in (first, second)]
        assert sum(h["read"] for h in healths) >= sum(
            len(envs) for envs in [*stream.before.values(), *stream.after.values()]
        )
        for replica in (first, second):
            assert await replica.terminate() == 0
            assert logged_errors(replica) == []
