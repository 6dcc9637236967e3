"""The audit projector on real Kafka and PostgreSQL: status, replay, erasure, retention."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import pytest

from chorus.base.clock import ManualClock, OffsetFileClock
from chorus.base.compat import fromisoformat
from chorus.base.db import create_pool
from chorus.base.settings import demo_key_service_credential
from chorus.contracts.base import CATALOG
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.registry import Registry
from chorus.platform.audit_projector.adapters.projection import REPLAY_PREFIX
from chorus.platform.audit_projector.adapters.queries import (
    approval_tasks,
    approval_view,
    status_view,
    timeline_entries,
)
from chorus.platform.audit_projector.config import Settings
from chorus.platform.audit_projector.domain import ERASURE_RECORDED, WORKFLOW_PURGED
from chorus.platform.audit_projector.replay import ReplayResult, compare, rebuild
from chorus.platform.audit_projector.service import make_spec
from chorus.privacy.crypto import HttpKeyStore, Sealer, keyed_ref, subject_hash
from chorus.privacy.feature import DEMO_SUBJECT_KEY
from chorus.runtime.runner import ServiceSettings, running
from chorus.web.apikeys import DEMO_KEYS, ApiKey, bearer
from tests.support.apis import trust
from tests.support.events import TaskSubmitted
from tests.support.kafka import envelope, events_of, local_verifier, publish, read_topic
from tests.support.processes import ServiceProcess, chorus, infra_env
from tests.support.registry import as_the_projector as projector_registry
from tests.support.testservice import make_spec as make_test_service

pytestmark = pytest.mark.integration

TEXT = {"content-type": "text/plain"}
DPO_KEY = "dpo-key"
"""An operator's key whose principal (the data-protection officer) an erasure records."""
KEYS = {**DEMO_KEYS, DPO_KEY: ApiKey(principal="dpo@example.test", role="operator")}
OPERATOR = bearer("demo-operator-key")
T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T]], *, what: str, timeout_s: float = 60.0) -> T:
    """The probe's first truthy result; fails naming ``what`` after ``timeout_s``.
    (tests.support.wait.wait_until, with a signature mypy can infer for async probes.)"""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        last = await probe()
        if last:
            return last
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(0.1)


# -- building synthetic workflows from the registry's examples ---------------------------------


class Stream:
    """Events to publish, each on the physical topic the registry assigns it."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.items: list[tuple[str, Envelope]] = []

    def add(
        self,
        event_type: str,
        workflow_id: str,
        at: datetime,
        *,
        workflow_type: str = "procurement",
        subject: str | None = None,
        priority: Any = "normal",
        **payload: Any,
    ) -> Envelope:
        """The registry's example of ``event_type`` with ``payload`` overrides, in an
        envelope of ``workflow_id`` that occurred at ``at``."""
        example = self.registry.examples[(event_type, 1)][0].body
        model = CATALOG[(event_type, 1)].model_validate({**example["payload"], **payload})
        env = envelope(model, workflow_id=workflow_id, workflow_type=workflow_type, priority=priority)
        producer = {**example["producer"], "service": self.producer(env, example)}
        env = env.model_copy(
            update={"occurred_at": at, "subject_ref": subject, "producer": ProducerRef(**producer)}
        )
        topic = self.registry.physical_topic(event_type, priority)
        self.items.append((topic, env))
        return env

    def producer(self, env: Envelope, example: dict[str, Any]) -> str:
        """Who states it: the example's producer, but a workflow's end by whom its type names
        for that outcome (workflows.yaml ended_by)."""
        if env.event_type == "workflow.ended":
            outcome = str(env.payload.get("outcome"))
            enders = self.registry.endings().get(env.workflow_type, {}).get(outcome)
            if enders:
                return sorted(enders)[0]
        return str(example["producer"]["service"])

    async def publish(self, bootstrap: str, items: Iterable[tuple[str, Envelope]] = ()) -> None:
        by_topic: dict[str, list[Envelope]] = defaultdict(list)
        for topic, env in list(items) or self.items:
            by_topic[topic].append(env)
        await asyncio.gather(*(publish(bootstrap, t, envs) for t, envs in by_topic.items()))


# Each kind of workflow as the events it publishes, in order.
_RECEIVED = ("workflow.started", "invoice.received")
_ASKED = (*_RECEIVED, "invoice.validated", "budget.reserved", "approval.requested")
_DECIDED = (*_ASKED, "approval.decision_submitted", "approval.decided")
_REQUESTED = ("workflow.started", "report.requested")
PATHS: dict[str, tuple[str, ...]] = {
    "completed": (*_DECIDED, "payment.issued", "workflow.ended", "requester.notified"),
    "budget_rejected": (
        *_RECEIVED,
        "invoice.validated",
        "budget.rejected",
        "workflow.ended",
        "requester.notified",
    ),
    "escalated": (*_ASKED, "approval.window_elapsed", "approval.escalated"),
    "dead_lettered": (*_RECEIVED, "event.dead_lettered"),
    "payment_failed": (*_DECIDED, "payment.failed", "budget.released", "workflow.ended"),
    "research_delivered": (
        *_REQUESTED,
        "report.drafted",
        "approval.requested",
        "approval.decided",
        "report.delivered",
        "workflow.ended",
    ),
    "research_review": (*_REQUESTED, "review.requested"),
}
KINDS = tuple(PATHS)
OUTCOMES = {"budget_rejected": "rejected", "payment_failed": "compensated"}
"""How a kind's workflow.ended ends it (the others complete)."""


def scenario(stream: Stream, kind: str, workflow_id: str, t0: datetime, subject: str) -> None:
    """One workflow of ``kind`` (its PATHS), its events a second apart."""
    common: dict[str, Any] = {"workflow_id": workflow_id, "subject": subject}
    if kind.startswith("research"):
        common.update(workflow_type="research_report", priority="high")
    for second, event_type in enumerate(PATHS[kind]):
        fields: dict[str, Any] = {}
        if event_type.startswith("approval."):
            fields["approval_id"] = f"appr-{workflow_id}"
        if event_type == "workflow.ended":
            fields["outcome"] = OUTCOMES.get(kind, "completed")
        elif event_type == "approval.window_elapsed":
            fields["level"] = 0
        elif event_type == "approval.escalated":
            fields["waiting_until"] = (t0 + timedelta(hours=16)).isoformat()
        stream.add(event_type, at=t0 + timedelta(seconds=second), **common, **fields)


# -- helpers -----------------------------------------------------------------------------------


@pytest.fixture
async def as_the_projector(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> AsyncIterator[tuple[Registry, str]]:
    """The test's registry and the name its projector runs under, which may sign what the
    projector states (tests.support.registry.as_the_projector)."""
    async with projector_registry(tmp_path, unique, kafka_bootstrap) as named:
        yield named


async def replay_all(
    registry: Registry, bootstrap: str, pool: asyncpg.Pool, live_schema: str
) -> ReplayResult:
    """Every topic of ``registry`` replayed into a fresh schema beside ``live_schema``, with
    the live projector's check of signed types."""
    return await rebuild(
        registry=registry,
        bootstrap=bootstrap,
        pool=pool,
        live_schema=live_schema,
        verifier=local_verifier(registry),
    )


def projector_settings(kafka_bootstrap: str, database_url: str, name: str, **extra: Any) -> Settings:
    return Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        log_json=False,
        http_port=0,
        service_name=name,
        api_keys=KEYS,
        **extra,
    )


def _json(found: Any) -> Any:
    """What the read API answers for a view (or a list of them)."""
    if isinstance(found, list):
        return [item.model_dump(mode="json") for item in found]
    return found.model_dump(mode="json") if found is not None else None


async def count(pg: asyncpg.Connection, sql: str, *args: Any) -> int:
    return int(await pg.fetchval(sql, *args))


async def counted(pg: asyncpg.Connection, sql: str, n: int, *, what: str, timeout_s: float = 60.0) -> None:
    """Once the count ``sql`` asks for reaches ``n`` (fails naming ``what`` after ``timeout_s``)."""
    await eventually(lambda: _at_least(count(pg, sql), n), what=what, timeout_s=timeout_s)


async def _at_least(value: Awaitable[int], n: int) -> bool:
    return int(await value) >= n


async def all_text(pg: asyncpg.Connection, schemas: Iterable[str]) -> str:
    """Every value of every row of every table in ``schemas``, as text (bytea decoded),
    so a string that is stored anywhere shows up."""
    parts: list[str] = []
    for schema in schemas:
        tables = await pg.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
        assert tables, f"schema {schema} has no tables"
        for t in tables:
            for row in await pg.fetch(f'SELECT * FROM {schema}."{t["table_name"]}"'):
                for value in row.values():
                    if isinstance(value, bytes):
                        parts.append(value.decode("utf-8", "replace"))
                    else:
                        parts.append(str(value))
    return "\n".join(parts)


# -- status ------------------------------------------------------------------------------------


async def test_procurement_run_shows_waiting_for_approval_then_completed(
    kafka_bootstrap: str,
    database_url: str,
    pg: asyncpg.Connection,
    unique: str,
    as_the_projector: tuple[Registry, str],
) -> None:
    registry, name = as_the_projector  # its projector states what audit_projector signs
    wf = f"wf-proc-{unique}"
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=10)
    first = Stream(registry)
    common: dict[str, Any] = {"workflow_id": wf, "subject": f"subject:{unique}"}
    first.add("workflow.started", at=t0, **common)
    first.add("invoice.received", at=t0 + timedelta(seconds=1), **common)
    first.add("invoice.validated", at=t0 + timedelta(seconds=2), **common)
    first.add("budget.reserved", at=t0 + timedelta(seconds=3), **common)
    requested = first.add("approval.requested", at=t0 + timedelta(seconds=4), approval_id="appr-1", **common)
    second = Stream(registry)
    second.add(
        "approval.decided",
        at=t0 + timedelta(seconds=60),
        approval_id="appr-1",
        decision="approve",
        decided_by="manager-17",
        **common,
    )
    second.add("payment.issued", at=t0 + timedelta(seconds=61), provider_reference="PRV-4711", **common)
    second.add(
        "workflow.ended",
        at=t0 + timedelta(seconds=62),
        outcome="completed",
        result={"payment_id": "pay-1"},
        **common,
    )

    async with running(
        make_spec(name), projector_settings(kafka_bootstrap, database_url, name), registry=registry
    ) as projector:
        await first.publish(kafka_bootstrap)
        status = await eventually(lambda: _status_if(pg, wf, name, events=5), what="five events projected")
        assert status.status == "waiting"
        assert status.waiting_for == "approval by manager"
        assert status.waiting_until == requested.occurred_at + timedelta(seconds=28800)
        assert status.stage == "approval.requested"
        assert status.pending_approval is not None
        assert status.pending_approval.approval_id == "appr-1"
        assert status.pending_approval.context is not None
        managers = await approval_tasks(pg, "manager", schema=name)
        assert [a.workflow_id for a in managers] == [wf]
        assert await approval_tasks(pg, "director", schema=name) == []
        # The JSON the gateway answers with.
        [task] = _json(await approval_tasks(pg, "manager", schema=name))
        assert task["approval_id"] == "appr-1"
        assert fromisoformat(task["waiting_until"]) == status.waiting_until
        gate = _json(await approval_view(pg, "appr-1", schema=name))
        assert gate is not None
        assert (gate["status"], gate["tier"], gate["workflow_id"]) == ("pending", "manager", wf)
        as_json = _json(await status_view(pg, wf, schema=name))
        assert as_json is not None
        assert as_json["status"] == "waiting"
        assert as_json["pending_approval"]["tier"] == "manager"

        # The end is published before the payment it follows: topics interleave.
        await second.publish(kafka_bootstrap, reversed(second.items))
        status = await eventually(lambda: _status_if(pg, wf, name, events=8), what="eight events projected")
        # The operator's view, through the projector's API.
        assert projector.http is not None
        api = ("--api", f"http://127.0.0.1:{projector.http.port}")
        code, out, err = await chorus("timeline", wf, *api)
        assert code == 0, err
        assert "completed" in out
        assert "approval by manager" in out
        assert "approve / manager-17" in out
        code, out, err = await chorus("timeline", wf, *api, "--output", "json")
        assert code == 0, err
        as_json = json.loads(out)
        assert as_json["status"] == "completed" and len(as_json["timeline"]) == 8
        code, out, err = await chorus("timeline", "wf-nobody", *api)
        assert code == 1
        assert "unknown workflow 'wf-nobody'" in err
    code, out, err = await chorus("timeline", wf, "--api", "http://127.0.0.1:1")
    assert code == 69
    assert "127.0.0.1:1" in err
    assert "make services" in err
    assert status.status == "completed"
    assert (status.outcome, status.result) == ("completed", {"payment_id": "pay-1"})
    assert (status.waiting_for, status.pending_approval) == (None, None)
    assert status.stage == "workflow.ended"
    assert status.started_at == t0
    assert status.duration_s == 62.0
    assert await approval_tasks(pg, schema=name) == []
    gate = _json(await approval_view(pg, "appr-1", schema=name))
    assert gate is not None
    assert (gate["status"], gate["decision"]) == ("decided", "approve")
    assert await approval_view(pg, "appr-nobody", schema=name) is None
    entries = await timeline_entries(pg, wf, schema=name)
    assert [e.event_type for e in entries][-3:] == [
        "approval.decided",
        "payment.issued",
        "workflow.ended",
    ]
    decided = entries[-3]
    assert (decided.decision, decided.actor) == ("approve", "manager-17")
    assert entries[-2].external_call == "payment provider: PRV-4711"


async def _status_if(pg: asyncpg.Connection, workflow_id: str, schema: str, *, events: int) -> Any:
    status = await status_view(pg, workflow_id, schema=schema)
    return status if status is not None and status.events >= events else None


# -- replay ------------------------------------------------------------------------------------


async def test_replaying_every_topic_rebuilds_the_live_projection_exactly(
    tmp_path: Path,
    kafka_bootstrap: str,
    database_url: str,
    pg: asyncpg.Connection,
    unique: str,
    as_the_projector: tuple[Registry, str],
) -> None:
    """Duplicates on the topics, a crash between DB commit and offset commit (so every
    record handled before it is redelivered), then a replay from the start: same rows."""
    registry, name = as_the_projector  # its projector states what audit_projector signs
    rng = random.Random(unique)
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=2)
    wave1 = Stream(registry)
    for i in range(105):
        kind = KINDS[i % len(KINDS)]
        scenario(wave1, kind, f"wf-{i:03d}-{kind}-{unique}", t0 + timedelta(minutes=i), f"s:{i}")
    duplicates = [item for item in wave1.items if rng.random() < 0.25]
    service = ServiceProcess(
        "audit_projector",
        {
            **infra_env(registry.root, kafka_bootstrap, database_url),
            "CHORUS_SERVICE_NAME": name,
            # Its dead-lettered workflows are hours old: no alerts of its own in the topics
            # counted below (the alerts have their own test).
            "CHORUS_PARKED_ALERT_AFTER_S": "1e9",
        },
        tmp_path,
    )
    with service:
        await wave1.publish(kafka_bootstrap, [*wave1.items, *duplicates])
        # Dies after its 200th committed event, before any offset commit.
        service.start(CHORUS_FAULTS="after_db_commit:200", CHORUS_COMMIT_INTERVAL_S="30")
        assert await service.wait_exit() == -signal.SIGKILL
        service.start()
        await service.wait_healthy()
        since = datetime.now(timezone.utc)
        await asyncio.sleep(1.0)  # Kafka timestamps of wave 2 fall after ``since``
        wave2 = Stream(registry)
        t1 = since + timedelta(seconds=5)
        for i in range(14):
            kind = KINDS[i % len(KINDS)]
            scenario(wave2, kind, f"wf-late-{i:02d}-{unique}", t1 + timedelta(seconds=i), "s:l")
        redelivered = rng.sample(wave1.items, 60)  # a producer retried old events
        await wave2.publish(kafka_bootstrap, [*wave2.items, *redelivered, *wave2.items[:10]])
        distinct = len({env.event_id for _, env in [*wave1.items, *wave2.items]})
        await counted(
            pg,
            f"SELECT count(*) FROM {name}.audit_log",
            distinct,
            timeout_s=120,
            what=f"{distinct} events in the live audit log",
        )
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{service.url}/metrics")).text  # no key: /metrics is open
        # The restarted process read everything again: the 200 events the first one
        # committed (offsets never were) and every duplicate copy were recognised.
        copies = len(duplicates) + len(redelivered) + 10
        assert _metric(metrics, "chorus_duplicates_skipped_total") >= copies + 200

        started = time.perf_counter()
        api = ("--api", service.url)
        code, out, err = await chorus("replay", "--projection", "audit", "--verify", *api)
        replay_s = time.perf_counter() - started
        assert code == 0, out + err
        assert "equal: 119 workflow(s)" in out
        records = len(wave1.items) + len(duplicates) + len(wave2.items) + 10 + 60
        assert f"replayed {records} record(s) ({records} projected)" in out, out
        summary = next(line for line in out.splitlines() if line.startswith("replayed"))
        print(f"\n{distinct} events, 119 workflows; replay --verify took {replay_s:.2f}s; {summary}")
        replay_schema = out.split("into schema ")[1].split()[0]
        assert replay_schema.startswith(REPLAY_PREFIX)
        for table in ("audit_log", "workflow_status"):
            assert await count(pg, f"SELECT count(*) FROM {replay_schema}.{table}") == await count(
                pg, f"SELECT count(*) FROM {name}.{table}"
            )
        await pg.execute(f"DROP SCHEMA {replay_schema} CASCADE")
        statuses = dict(await pg.fetch(f"SELECT status, count(*) FROM {name}.workflow_status GROUP BY 1"))
        assert statuses == {
            "completed": 34,  # 17 paid invoices, 17 delivered reports
            "rejected": 17,
            "waiting": 34,  # 17 escalated approvals, 17 reviews
            "attention": 17,  # dead letters
            "compensated": 17,
        }

        # From a timestamp: only the workflows started after it are compared.
        since_arg = ("--since", since.isoformat())
        code, out, err = await chorus("replay", "--verify", "--drop", *since_arg, *api)
        assert code == 0, out + err
        assert "equal: 14 workflow(s)" in out

        # The comparison notices a single changed row and names its workflow.
        changed = f"wf-000-completed-{unique}"
        await pg.execute(
            f"UPDATE {name}.workflow_status SET stage = 'invoice.received' WHERE workflow_id = $1",
            changed,
        )
        code, out, err = await chorus("replay", "--verify", "--drop", *api)
        assert code == 1, out + err
        assert "1 of 119 workflow(s) differ" in out
        assert changed in out
        await service.terminate()


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


# -- erasure -----------------------------------------------------------------------------------


async def test_an_erased_subject_is_nowhere_in_projections_or_state_and_the_audit_says_so(
    as_the_projector: tuple[Registry, str],
    kafka_bootstrap: str,
    database_url: str,
    pg: asyncpg.Connection,
    unique: str,
) -> None:
    registry, name = as_the_projector
    svc = f"svc_{unique}"
    # As the gateway keys them (HMAC under CHORUS_SUBJECT_KEY): a well-behaved producer never
    # puts the reference itself in an envelope; erasing by either form finds the same subject.
    erased, kept = (keyed_ref(DEMO_SUBJECT_KEY, f"subject:{s}-{unique}") for s in ("erase", "keep"))
    pii = {erased: "Jane Roe <jane.roe@example.test>", kept: "John Poe <john.poe@example.test>"}
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=30)
    stream = Stream(registry)
    tasks = []
    for n, subject in enumerate((erased, kept)):
        wf = f"wf-{n}-{unique}"
        who = pii[subject]
        at = iter(t0 + timedelta(seconds=10 * n + i) for i in range(10))
        stream.add("workflow.started", wf, next(at), subject=subject, submitted_by=who)
        stream.add("invoice.received", wf, next(at), subject=subject, document_text=f"Invoice of {who}")
        stream.add(
            "approval.requested",
            wf,
            next(at),
            subject=subject,
            approval_id=f"a-{n}",
            context={"summary": f"pay {who}"},
        )
        stream.add("approval.decided", wf, next(at), subject=subject, approval_id=f"a-{n}", decided_by=who)
        stream.add("workflow.ended", wf, next(at), subject=subject, outcome="completed", result={"to": who})
        # Another service keeps state for the same workflow and subject.
        task = envelope(TaskSubmitted(task=f"expenses of {who}"), workflow_id=wf)
        tasks.append(task.model_copy(update={"subject_ref": subject}))

    settings = projector_settings(kafka_bootstrap, database_url, name, data_holders=[name, svc])
    other = ServiceSettings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False)
    async with (
        running(make_spec(name), settings, registry=registry) as projector,
        running(make_test_service(svc), other, registry=registry),
    ):
        assert projector.http is not None
        api = f"http://127.0.0.1:{projector.http.port}"
        await stream.publish(kafka_bootstrap)
        await publish(kafka_bootstrap, registry.physical_topic("test.task_submitted"), tasks)
        await counted(pg, f"SELECT count(*) FROM {name}.audit_log", 10, what="ten events projected")
        await counted(
            pg,
            f"SELECT count(*) FROM {svc}.outbox WHERE dispatched_at IS NOT NULL",
            2,
            what="the other service handled both tasks",
        )
        pool = await create_pool(database_url)
        try:
            replayed = await replay_all(registry, kafka_bootstrap, pool, name)
        finally:
            await pool.close()
        # A service may hold a published row of a workflow without a checkpoint of it (the
        # timer service's fired envelopes): the projector has none, and gets one of each.
        for n, subject in enumerate((erased, kept)):
            await pg.execute(
                f"""INSERT INTO {name}.outbox (topic, value, workflow_id, dispatched_at)
                    VALUES ('fired', $1, $2, now())""",
                f"reminder for {pii[subject]}".encode(),
                f"wf-{n}-{unique}",
            )
        schemas = [name, svc, replayed.target.schema]
        before = await all_text(pg, schemas)
        assert erased in before and pii[erased] in before  # the scan sees stored data

        # Who erased is the key's principal, never something the caller writes.
        code, out, err = await chorus(
            "erase",
            "--subject",
            erased,
            "--yes",
            "--api",
            api,
            "--wait",
            "60",
            env={"CHORUS_API_KEY": DPO_KEY},
        )
        assert code == 0, out + err  # every data holder confirmed within the wait
        assert svc in out and name in out and "not yet" not in out
        after = await all_text(pg, schemas)
        assert erased not in after
        assert pii[erased] not in after
        assert kept in after and pii[kept] in after  # only that subject
        record = await pg.fetchrow(f"SELECT * FROM {name}.audit_log WHERE event_type = $1", ERASURE_RECORDED)
        assert record is not None
        assert (record["origin"], record["actor"], record["subject_ref"]) == (
            "erasure",
            "dpo@example.test",
            None,
        )
        body = json.loads(record["payload"])
        assert body["subject_hash"] == subject_hash(erased)
        assert body["rows"][f"{name}.audit_log"] == 5
        assert body["rows"][f"{replayed.target.schema}.audit_log"] == 5
        async with httpx.AsyncClient(base_url=api, headers=OPERATOR) as client:
            answer = (await client.get(f"/v1/erasures/{body['erasure_id']}")).json()
        assert (answer["complete"], answer["pending"], answer["actor"]) == (True, [], "dpo@example.test")
        removed = answer["confirmations"][svc]
        assert (removed["workflows"], removed["rows"][f"{svc}.state"]) == (1, 1)
        assert removed["rows"][f"{svc}.outbox"] >= 1
        assert answer["confirmations"][name]["rows"][f"{name}.outbox"] == 1
        # Asking again (by id) shows the same confirmations; an unknown id is an error.
        code, out, err = await chorus("erase", "--id", body["erasure_id"], "--api", api)
        assert code == 0 and svc in out, out + err
        code, out, err = await chorus("erase", "--id", "not-an-id", "--api", api)
        assert code == 1 and "no erasure 'not-an-id'" in err, out + err
        status = await status_view(pg, f"wf-0-{unique}", schema=name)
        assert status is not None
        assert (status.status, status.subject_ref, status.result) == (
            "completed",
            None,
            {"erased": True},
        )
        assert [e.payload for e in await timeline_entries(pg, f"wf-0-{unique}", schema=name)] == [
            {"erased": True}
        ] * 5

        # Whatever arrives for the subject later is written redacted.
        late = Stream(registry)
        late.add(
            "payment.failed",
            f"wf-0-{unique}",
            t0 + timedelta(minutes=5),
            subject=erased,
            reason=f"the card of {pii[erased]} was declined",
        )
        await late.publish(kafka_bootstrap)
        await counted(pg, f"SELECT count(*) FROM {name}.audit_log", 12, what="the late event projected")
        assert pii[erased] not in await all_text(pg, [name])

        # A replay after the erasure rebuilds the redacted projection, not the original.
        pool = await create_pool(database_url)
        try:
            again = await replay_all(registry, kafka_bootstrap, pool, name)
            async with pool.acquire() as conn:
                comparison = await compare(conn, live=name, replay=again.target.schema)
        finally:
            await pool.close()
        assert comparison.equal, comparison.differing
        assert pii[erased] not in await all_text(pg, [again.target.schema])
        for schema in (replayed.target.schema, again.target.schema):
            await pg.execute(f"DROP SCHEMA {schema} CASCADE")


# -- retention ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["archive", "purge"])
async def test_the_janitor_removes_expired_workflows_everywhere_and_records_it(
    *,
    as_the_projector: tuple[Registry, str],
    kafka_bootstrap: str,
    database_url: str,
    pg: asyncpg.Connection,
    unique: str,
    mode: str,
) -> None:
    registry, name = as_the_projector
    svc = f"svc_{unique}"
    now = datetime.now(timezone.utc)
    clock = ManualClock(now)
    research, procurement = f"wf-r-{unique}", f"wf-p-{unique}"
    subject = f"subject:{unique}"
    stream = Stream(registry)
    rr: dict[str, Any] = {"workflow_type": "research_report", "subject": subject}
    stream.add("workflow.started", research, now - timedelta(minutes=2), **rr)
    stream.add("report.requested", research, now - timedelta(minutes=1), **rr)
    stream.add("workflow.started", procurement, now - timedelta(minutes=2), subject=subject)
    stream.add("invoice.received", procurement, now - timedelta(minutes=1), subject=subject)
    tasks = [
        envelope(TaskSubmitted(task="notes"), workflow_id=wf).model_copy(update={"subject_ref": subject})
        for wf in (research, procurement)
    ]
    settings = projector_settings(
        kafka_bootstrap,
        database_url,
        name,
        retention_days={"procurement": 90.0, "research_report": 30.0},
        default_retention_days=30.0,
        janitor_mode=mode,
        janitor_interval_s=3600.0,
    )
    other = ServiceSettings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False)

    async def runs(workflows: int) -> list[asyncpg.Record]:
        return list(
            await pg.fetch(
                f"SELECT * FROM {name}.janitor_runs WHERE workflows = $1 ORDER BY clock_now",
                workflows,
            )
        )

    async with (
        running(make_spec(name), settings, registry=registry, clock=clock),
        running(make_test_service(svc), other, registry=registry),
    ):
        await stream.publish(kafka_bootstrap)
        await publish(kafka_bootstrap, registry.physical_topic("test.task_submitted"), tasks)
        await counted(pg, f"SELECT count(*) FROM {name}.workflow_status", 2, what="both workflows projected")
        await counted(pg, f"SELECT count(*) FROM {svc}.state", 2, what="the other service's checkpoints")
        # An event waiting behind a retry in the other service (parked) is state too.
        await pg.execute(
            f"""INSERT INTO {svc}.parked (workflow_id, topic, partition, "offset", value, attempt,
                                          parked_at)
                VALUES ($1, 't', 0, 0, 'x'::bytea, 1, now())""",
            research,
        )
        assert len(await runs(0)) >= 1  # the pass at start found nothing to do

        clock.advance(timedelta(days=31).total_seconds())
        first = (await eventually(lambda: runs(1), what="a pass that removed one workflow"))[0]
        assert first["mode"] == mode
        assert await status_view(pg, research, schema=name) is None
        assert await status_view(pg, procurement, schema=name) is not None  # 90 days
        rows = json.loads(first["rows"])
        assert rows == {f"{name}.audit_log": 2, f"{name}.workflow_status": 1}
        [purge] = await timeline_entries(pg, research, schema=name)  # the only row left of it
        assert (purge.event_type, purge.origin) == (WORKFLOW_PURGED, "janitor")
        assert purge.decision == ("archived" if mode == "archive" else "purged")
        assert purge.payload["rows"] == rows
        assert subject not in json.dumps(purge.payload)
        assert (
            await pg.fetchval(
                f"SELECT subject_ref FROM {name}.audit_log WHERE event_id::text = $1",
                purge.event_id,
            )
            is None
        )
        # The other service removed its own rows of the workflow when it read
        # workflows.retired, and said so.
        confirmed = await eventually(
            lambda: pg.fetchrow(
                f"SELECT * FROM {name}.data_confirmations WHERE request_id = $1 AND service = $2",
                f"{first['run_id']}/1",
                svc,
            ),
            what="the other service's confirmation",
        )
        assert (confirmed["request"], confirmed["workflows"]) == ("retirement", 1)
        removed = json.loads(confirmed["rows"])
        assert removed[f"{svc}.state"] == removed[f"{svc}.parked"] == removed[f"{svc}.inbox"] == 1
        for table in ("state", "inbox", "parked"):
            left = await count(pg, f"SELECT count(*) FROM {svc}.{table} WHERE workflow_id = $1", research)
            assert left == 0, f"{svc}.{table} still has {left} row(s) of {research}"
        assert await count(pg, f"SELECT count(*) FROM {svc}.state WHERE workflow_id = $1", procurement) == 1
        archived = {
            schema: await count(pg, f"SELECT count(*) FROM {schema}.archive WHERE workflow_id = $1", research)
            for schema in (name, svc)
        }
        # Each keeps its own archive: 2 audit rows and the status here, state and parked there.
        assert archived == ({name: 3, svc: 2} if mode == "archive" else {name: 0, svc: 0})

        # A late event of the removed workflow does not bring it back.
        late = Stream(registry)
        late.add("report.drafted", research, now, **rr)
        await late.publish(kafka_bootstrap)
        await eventually(
            lambda: count(
                pg,
                f"SELECT count(*) FROM {name}.inbox WHERE event_id = $1",
                late.items[0][1].event_id,
            ),
            what="the late event consumed",
        )
        assert await status_view(pg, research, schema=name) is None

        clock.advance(timedelta(days=60).total_seconds())
        await eventually(lambda: _at_least(_len(runs(1)), 2), what="a pass at day 91")
        assert await status_view(pg, procurement, schema=name) is None
        await counted(
            pg, f"SELECT 1 - count(*) FROM {svc}.state", 1, what="the other service's last checkpoint retired"
        )
        assert await count(pg, f"SELECT count(*) FROM {name}.retired_workflows") == 2


async def _len(value: Awaitable[list[asyncpg.Record]]) -> int:
    return len(await value)


async def test_the_read_api_answers_what_other_services_may_know(
    kafka_bootstrap: str,
    database_url: str,
    unique: str,
    as_the_projector: tuple[Registry, str],
) -> None:
    """Other services (the gateway) learn status, timeline and approvals over HTTP, never
    from the projector's tables."""
    registry, name = as_the_projector  # its projector states what audit_projector signs
    wf = f"wf-api-{unique}"
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    stream = Stream(registry)
    stream.add("workflow.started", wf, t0)
    stream.add("invoice.received", wf, t0 + timedelta(seconds=1))
    stream.add("approval.requested", wf, t0 + timedelta(seconds=2), approval_id=f"appr-{unique}")
    settings = projector_settings(kafka_bootstrap, database_url, name)
    async with running(make_spec(name), settings, registry=registry) as runner:
        await stream.publish(kafka_bootstrap)
        assert runner.http is not None
        base_url = f"http://127.0.0.1:{runner.http.port}"
        async with httpx.AsyncClient(base_url=base_url, headers=OPERATOR) as api:

            async def projected() -> bool:
                return len((await api.get(f"/v1/workflows/{wf}/timeline")).json()["timeline"]) == 3

            await eventually(projected, what="three events projected")
            status = (await api.get(f"/v1/workflows/{wf}")).json()
            timeline = (await api.get(f"/v1/workflows/{wf}/timeline")).json()["timeline"]
            listed = (await api.get("/v1/approvals", params={"tier": "manager"})).json()["approvals"]
            approval = (await api.get(f"/v1/approvals/appr-{unique}")).json()
            missing = await api.get("/v1/workflows/wf-nobody")
            too_long = await api.get("/v1/approvals/" + "a" * 201)
            # The operator endpoints refuse bad bodies naming the field, before doing anything.
            not_json = await api.post("/v1/erasures", content=b"subject_ref=x", headers=TEXT)
            wrong_type = await api.post("/v1/erasures", json={"subject_ref": 5})
            actor_given = await api.post("/v1/erasures", json={"subject_ref": "x", "actor": "someone else"})
            naive = await api.post("/v1/replays", json={"since": "2026-01-01T00:00:00"})
            unknown_job = await api.get("/v1/replays/nope")
            # Every route takes a key: reads are for operators, auditors and the gateway;
            # erasures and replays for operators only.
            anonymous = httpx.AsyncClient(base_url=base_url)
            refusals = {
                (method, path, key): (
                    await anonymous.request(method, path, json=body, headers=bearer(key) if key else {})
                ).status_code
                for method, path, body in [
                    ("GET", f"/v1/workflows/{wf}", None),
                    ("GET", f"/v1/workflows/{wf}/timeline", None),
                    ("GET", "/v1/approvals", None),
                    ("POST", "/v1/erasures", {"subject_ref": "nobody"}),
                    ("POST", "/v1/replays", {}),
                ]
                for key in ("", "made-up", "demo-submitter-key", "demo-manager-key", "demo-gateway-key",
                            "demo-auditor-key")
            }  # fmt: skip
            await anonymous.aclose()
    assert (status["workflow_id"], status["status"]) == (wf, "waiting")
    assert [e["event_type"] for e in timeline] == [
        "workflow.started",
        "invoice.received",
        "approval.requested",
    ]
    assert [a["approval_id"] for a in listed if a["workflow_id"] == wf] == [f"appr-{unique}"]
    assert (approval["workflow_id"], approval["status"]) == (wf, "pending")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith(
        "application/problem+json"
    )
    assert too_long.status_code == 422 and "approval_id" in too_long.json()["detail"]
    assert not_json.status_code == 415
    assert wrong_type.status_code == 422 and "/subject_ref" in wrong_type.json()["detail"]
    assert actor_given.status_code == 422 and "/actor" in actor_given.json()["detail"]
    reads = {"GET"}
    assert {k: v for k, v in refusals.items() if k[2] in ("", "made-up")} == {
        k: 401 for k in refusals if k[2] in ("", "made-up")
    }
    allowed = {k: v for k, v in refusals.items() if v not in (401, 403)}  # every other answer: the route ran
    assert sorted(allowed) == sorted(
        k for k in refusals if k[0] in reads and k[2] in ("demo-gateway-key", "demo-auditor-key")
    ), refusals
    assert naive.status_code == 422 and "/since" in naive.json()["detail"]
    assert unknown_job.status_code == 404


async def test_a_workflow_parked_behind_a_dead_letter_too_long_raises_one_alert_until_its_end(
    tmp_path: Path,
    kafka_bootstrap: str,
    database_url: str,
    unique: str,
    as_the_projector: tuple[Registry, str],
) -> None:
    """Bounded parking, on simulated time: a workflow stopped by a dead letter lists as
    ``attention`` with why and since when; an hour later (parked_alert_after_s) the projector
    raises workflow.attention_needed, once, and the list says so; its deadline still ends it."""
    registry, name = as_the_projector  # it states workflow.attention_needed (signed)
    clock_file = tmp_path / "clock"
    parked, fine = f"wf-parked-{unique}", f"wf-fine-{unique}"
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    stream = Stream(registry)
    scenario(stream, "dead_lettered", parked, t0, f"subject:{unique}")
    scenario(stream, "completed", fine, t0, f"subject:{unique}")
    settings = projector_settings(
        kafka_bootstrap,
        database_url,
        name,
        clock=f"offset-file:{clock_file}",
        parked_alert_after_s=3600,
        attention_check_s=1,
    )
    async with (
        running(make_spec(name), settings, registry=registry) as projector,
        httpx.AsyncClient() as http,
    ):
        assert projector.http is not None
        url = f"http://127.0.0.1:{projector.http.port}/v1/workflows"

        async def attention() -> list[dict[str, Any]]:
            answer = await http.get(url, params={"status": "attention"}, headers=OPERATOR)
            assert answer.status_code == 200, answer.text
            return [w for w in answer.json()["workflows"] if w["workflow_id"] in (parked, fine)]

        await stream.publish(kafka_bootstrap)
        [listed] = await eventually(attention, what="the parked workflow listed")
        assert listed["workflow_id"] == parked
        why = listed["attention"]
        assert "dead-lettered" in why["why"] and why["alerted_at"] is None
        assert fromisoformat(why["since"]) == t0 + timedelta(seconds=2)

        OffsetFileClock.advance(clock_file, 3600)

        async def alerted() -> Any:
            found = await attention()
            return found and found[0]["attention"]["alerted_at"]

        await eventually(alerted, what="the alert")
        await asyncio.sleep(3)  # three more looks: none raises it again
        # Then its deadline ends it (the end, on the same one-partition topic, is read last).
        ended = stream.add("workflow.ended", parked, datetime.now(timezone.utc), outcome="timed_out")
        lifecycle = registry.physical_topic("workflow.ended")
        await stream.publish(kafka_bootstrap, [(lifecycle, ended)])
        records = await read_topic(
            kafka_bootstrap,
            [lifecycle],
            until=lambda rs: any(
                e["event_id"] == str(ended.event_id) for e in events_of(rs, "workflow.ended")
            ),
        )
        alerts = [e for e in events_of(records, "workflow.attention_needed") if e["workflow_id"] == parked]
        assert len({a["event_id"] for a in alerts}) == 1 and alerts[0]["payload"]["waited_s"] >= 3600
        await eventually(lambda: _none(attention()), what="the ended workflow off the list")
        status = (await http.get(f"{url}/{parked}", headers=OPERATOR)).json()
        assert status["status"] == "timed_out" and status["attention"] is None


async def _none(found: Awaitable[list[Any]]) -> bool:
    return not await found


async def test_every_read_of_personal_data_is_in_the_access_log(
    kafka_bootstrap: str,
    database_url: str,
    pg: asyncpg.Connection,
    unique: str,
    key_service: str,
    as_the_projector: tuple[Registry, str],
) -> None:
    registry, name = as_the_projector  # its projector states what audit_projector signs
    raw = f"subject:reader-{unique}"
    subject = keyed_ref(DEMO_SUBJECT_KEY, raw)  # as the gateway keeps it
    workflow_id = f"wf-read-{unique}"
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    stream = Stream(registry)
    stream.add("workflow.started", workflow_id, t0, subject=subject, submitted_by=f"Ada {unique}")
    stream.add(
        "invoice.received",
        workflow_id,
        t0 + timedelta(seconds=1),
        subject=subject,
        document_text=f"Invoice for Ada {unique}",
    )
    stream.add("workflow.deadline_reached", f"wf-none-{unique}", t0, subject=None)  # nothing personal
    async with httpx.AsyncClient(timeout=10, verify=trust()) as client:
        store = HttpKeyStore("local", key_service, demo_key_service_credential("gateway"), client)
        sealer = Sealer(registry, {"local": store}, region="local")
        sealed = [(topic, await sealer.seal(env)) for topic, env in stream.items]
    # Renamed for this test, it reads keys with the audit projector's credential.
    own = demo_key_service_credential("audit_projector")
    settings = projector_settings(kafka_bootstrap, database_url, name, key_service_api_key=own)
    async with running(make_spec(name), settings, registry=registry) as projector:
        assert projector.http is not None
        api = f"http://127.0.0.1:{projector.http.port}"
        await stream.publish(kafka_bootstrap, sealed)
        await counted(pg, f"SELECT count(*) FROM {name}.audit_log", 3, what="three events projected")
        assert f"Ada {unique}" not in await all_text(pg, [name])  # kept sealed

        async with httpx.AsyncClient(base_url=api, timeout=10) as http:
            as_operator = await http.get(f"/v1/workflows/{workflow_id}/timeline", headers=OPERATOR)
            assert f"Invoice for Ada {unique}" in as_operator.text  # opened for the reader
            for_someone = await http.get(
                f"/v1/workflows/{workflow_id}/timeline",
                headers={**bearer("demo-gateway-key"), "X-Chorus-On-Behalf-Of": "demo-submitter"},
            )
            assert for_someone.status_code == 200
            # A read with nothing personal in it is not an access to personal data.
            await http.get(f"/v1/workflows/wf-none-{unique}/timeline", headers=OPERATOR)

        code, out, err = await chorus(
            "audit", "access", "--subject", raw, "--api", api, env={"CHORUS_API_KEY": "demo-auditor-key"}
        )
        assert code == 0, out + err
        assert "2 read(s)" in out, out
        assert "sam.operator" in out and "gateway" in out and "demo-submitter" in out
        assert "/timeline/0/payload/submitted_by" in out and "/timeline/1/payload/document_text" in out
        rows = await pg.fetch(f"SELECT principal, on_behalf_of, workflow_id FROM {name}.access_log")
        assert sorted((r["principal"], r["on_behalf_of"], r["workflow_id"]) for r in rows) == [
            ("gateway", "demo-submitter", workflow_id),
            ("sam.operator", None, workflow_id),
        ]
        # Nobody but operators and auditors reads the access log.
        code, out, err = await chorus(
            "audit", "access", "--subject", raw, "--api", api, env={"CHORUS_API_KEY": "demo-submitter-key"}
        )
        assert (code != 0 and "403" in err) or "may not" in err
