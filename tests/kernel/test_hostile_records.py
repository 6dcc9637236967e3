"""Input is never an infrastructure failure: whatever a record carries ends as a handled
event or a dead letter with its original bytes, and the partition behind it flows on.
Only PostgreSQL or Kafka being unavailable may hold a record, and then it says so."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from typer.testing import CliRunner

from chorus.contracts.envelope import ProducerRef
from chorus.contracts.platform import EventDiscarded, OriginalRecord, RetryDue
from chorus.contracts.registry import Registry
from chorus.kernel.codec import encode
from chorus.platform.timer_service.config import Settings as TimerSettings
from chorus.platform.timer_service.service import SPEC as TIMER_SPEC
from chorus.runtime.runner import ServiceRunner, ServiceSettings, running
from chorus.tools.cli.main import app as cli
from tests.support.events import TaskSubmitted
from tests.support.kafka import envelope, events_of, publish, publish_with_raw_header_key, read_topic
from tests.support.onkafka import in_process
from tests.support.registry import isolated_registry
from tests.support.sealed import opened
from tests.support.testservice import make_spec
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


def settings(kafka: str, db: str, **extra: Any) -> ServiceSettings:
    return ServiceSettings(kafka_bootstrap=kafka, database_url=db, log_json=False, **extra)


def letters_for(records: list[Any], **match: Any) -> list[dict[str, Any]]:
    letters = [e["payload"] for e in events_of(records, "event.dead_lettered")]
    return [p for p in letters if all(p.get(k) == v for k, v in match.items())]


async def done_and_dead_lettered(
    kafka: str, registry: Registry, *, done: int, letters: int, timeout_s: float = 60.0
) -> list[Any]:
    """Records of the task topic and the dead-letter topic, once ``done`` tasks are done
    and ``letters`` records are dead-lettered."""
    return await read_topic(
        kafka,
        [registry.physical_topic("test.task_submitted"), registry.physical_topic("event.dead_lettered")],
        until=lambda rs: len(events_of(rs, "test.task_done")) >= done and len(letters_for(rs)) >= letters,
        timeout_s=timeout_s,
    )


def original_bytes(letter: dict[str, Any]) -> bytes:
    return base64.b64decode(opened(letter["original"])["value_b64"])


Start = Callable[..., Awaitable[tuple[Registry, ServiceRunner]]]


@pytest.fixture
async def start(tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str) -> AsyncIterator[Start]:
    """Starts the test service (with ``extra`` settings) on the test's own topics, the timer
    service beside it (durable retries are timers); both stop after the test."""
    async with AsyncExitStack() as stack:

        async def started(**extra: Any) -> tuple[Registry, ServiceRunner]:
            registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
            timers = TimerSettings(
                **in_process(kafka_bootstrap, database_url), group_id=f"timers-{unique}", max_idle_s=0.1
            )
            await stack.enter_async_context(running(TIMER_SPEC, timers, registry=registry))
            service = running(
                make_spec(f"svc_{unique}"),
                settings(kafka_bootstrap, database_url, **extra),
                registry=registry,
            )
            return registry, await stack.enter_async_context(service)

        yield started


POISON = [
    b"[" * 100_000,  # the JSON decoder's RecursionError: every consumer used to retry it forever
    b'{"event_type": "test.task_submitted", "schema_version": NaN}',
    b'{"a": "\\ud800"}',
    '{"a": "Grüße"}'.encode("utf-16"),
]


async def test_records_the_decoder_chokes_on_are_dead_lettered_and_the_next_event_of_their_key_flows(
    start: Start, kafka_bootstrap: str
) -> None:
    registry, runner = await start()
    topic = registry.physical_topic("test.task_submitted")
    good = envelope(TaskSubmitted(task="after the poison"))
    key = good.workflow_id.encode()
    # A well-formed event of this very workflow whose text PostgreSQL cannot store.
    nul = encode(envelope(TaskSubmitted(task="a\x00b"), workflow_id=good.workflow_id))
    # An attempt no column can hold (it overflowed PostgreSQL's int even as a dead letter).
    overflow = encode(envelope(TaskSubmitted(task="again"), workflow_id=good.workflow_id)).replace(
        b'"attempt":1', b'"attempt":3000000000'
    )
    # A time UTC cannot hold: pydantic let Python's OverflowError through, naming nothing.
    early = re.sub(
        rb'"occurred_at":"[^"]*"',
        b'"occurred_at":"0001-01-01T00:00:00+01:00"',
        encode(envelope(TaskSubmitted(task="early"), workflow_id=good.workflow_id)),
    )
    poison = [*POISON, nul, overflow, early]
    await publish(kafka_bootstrap, topic, poison, key=key)  # same key, same partition, first
    await publish(kafka_bootstrap, topic, [good])
    records = await done_and_dead_lettered(kafka_bootstrap, registry, done=1, letters=len(poison))
    assert runner.fatal is None
    assert [d["payload"]["task"] for d in events_of(records, "test.task_done")] == ["after the poison"]
    letters = letters_for(records)
    assert sorted(original_bytes(letter) for letter in letters) == sorted(poison)
    assert {letter["error"]["category"] for letter in letters} == {"decode"}
    deep = next(letter for letter in letters if original_bytes(letter) == POISON[0])
    assert "nested deeper than 64 levels" in deep["error"]["message"]
    stored = next(letter for letter in letters if original_bytes(letter) == nul)
    assert stored["error"]["pointer"] == "/payload/task"
    assert "NUL" in stored["error"]["message"]
    counted = next(letter for letter in letters if original_bytes(letter) == overflow)
    assert counted["error"]["pointer"] == "/attempt"
    dated = next(letter for letter in letters if original_bytes(letter) == early)
    assert dated["error"]["pointer"] == "/occurred_at"
    assert "outside the years 1 to 9999" in dated["error"]["message"]


async def test_a_header_key_that_is_not_utf8_is_a_dead_letter_and_the_service_and_its_timers_go_on(
    start: Start, kafka_bootstrap: str, unique: str
) -> None:
    """aiokafka decodes header keys strictly while it unpacks a fetch, before Chorus sees a
    record: one such record raised out of every poll, so its consumer exited and restarted
    onto it again (on the timers topic, no timer fired any more)."""
    registry, runner = await start()
    topic = registry.physical_topic("test.task_submitted")
    first = envelope(TaskSubmitted(task="behind a header key that is not UTF-8"))
    value, key = encode(first), first.workflow_id.encode()
    for where in (topic, registry.physical_topic("timer.schedule")):
        await publish_with_raw_header_key(
            kafka_bootstrap, where, value, key=key, header_key=b"trace-\xff\xfe"
        )
    after = envelope(TaskSubmitted(task="after"), workflow_id=first.workflow_id)
    # A call that fails is retried through the timer service: its letter comes only if timers fire.
    call = envelope(TaskSubmitted(task="retried", mode="call", url="http://127.0.0.1:9/hook"))
    await publish(kafka_bootstrap, topic, [after, call])
    records = await done_and_dead_lettered(kafka_bootstrap, registry, done=1, letters=3, timeout_s=120)
    assert runner.fatal is None
    assert [d["payload"]["task"] for d in events_of(records, "test.task_done")] == ["after"]
    unreadable = [letter for letter in letters_for(records) if letter["error"]["category"] == "decode"]
    assert {letter["service"] for letter in unreadable} == {f"svc_{unique}", "timer_service"}
    for letter in unreadable:
        assert letter["error"]["pointer"] == "/headers"
        assert "b'trace-\\xff\\xfe' is not UTF-8" in letter["error"]["message"]
        assert original_bytes(letter) == value
    [retried] = [letter for letter in letters_for(records) if letter["error"]["category"] == "transient"]
    assert retried["attempts"] == 4


async def test_control_records_that_do_not_make_sense_are_dead_letters_not_crashes(
    start: Start, kafka_bootstrap: str, unique: str
) -> None:
    registry, runner = await start()
    svc = f"svc_{unique}"
    broken_retry = envelope(
        RetryDue(
            service=svc,
            consumer_group=svc,
            attempt=2,
            original=OriginalRecord(topic="t", partition=0, offset=0, value_b64="not base64!"),
            failures=[],
        )
    )
    # From the dead-letter service itself (signed: tests.support.kafka.publish), so it
    # is the malformed id that is refused, not the sender.
    broken_discard = envelope(
        EventDiscarded(
            service=svc, consumer_group=svc, discarded_event_id="not-a-uuid", reason="x", actor="someone"
        )
    ).model_copy(update={"producer": ProducerRef(service="deadletter_service", version="0.1.0")})
    await publish(kafka_bootstrap, registry.physical_topic("retry.due"), [broken_retry, broken_discard])
    good = envelope(TaskSubmitted(task="after"))
    await publish(kafka_bootstrap, registry.physical_topic("test.task_submitted"), [good])
    records = await done_and_dead_lettered(kafka_bootstrap, registry, done=1, letters=2)
    assert runner.fatal is None
    pointers = sorted(letter["error"]["pointer"] for letter in letters_for(records))
    assert pointers == ["/payload/discarded_event_id", "/payload/original"]


async def test_one_record_postgres_refuses_in_a_group_commit_is_dead_lettered_and_the_others_commit(
    start: Start, kafka_bootstrap: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry, runner = await start()
    topic = registry.physical_topic("test.task_submitted")
    tasks = [envelope(TaskSubmitted(task=f"t{i}")) for i in range(30)]
    bad = envelope(TaskSubmitted(task="the LLM answered a NUL", mode="nul_state"))
    # One burst: lanes of different workflows finish together and share commits.
    await publish(kafka_bootstrap, topic, [*tasks[:15], bad, *tasks[15:]])
    records = await done_and_dead_lettered(kafka_bootstrap, registry, done=30, letters=1)
    assert runner.fatal is None
    assert sorted(d["payload"]["task"] for d in events_of(records, "test.task_done")) == sorted(
        f"t{i}" for i in range(30)
    )
    [letter] = letters_for(records)
    assert letter["original_workflow_id"] == bad.workflow_id
    assert letter["error"]["error_class"] == "RefusedByStoreError"
    assert "\\u0000 cannot be converted to text" in letter["error"]["message"]
    assert json.loads(original_bytes(letter))["event_id"] == str(bad.event_id)
    outcomes = await pg.fetch(f"SELECT outcome, count(*) AS n FROM svc_{unique}.inbox GROUP BY outcome")
    assert {r["outcome"]: r["n"] for r in outcomes} == {"done": 30, "dead_lettered": 1}


async def test_a_value_too_long_for_a_column_is_a_dead_letter_not_a_stall(
    start: Start, kafka_bootstrap: str
) -> None:
    registry, _ = await start()
    topic = registry.physical_topic("test.task_submitted")
    long_note = envelope(TaskSubmitted(task="long", mode="note", note="ü" * 65))
    short_note = envelope(TaskSubmitted(task="short", mode="note", note="Grüße 東京"))
    await publish(kafka_bootstrap, topic, [long_note, short_note])
    records = await done_and_dead_lettered(kafka_bootstrap, registry, done=1, letters=1)
    [letter] = letters_for(records)
    assert letter["original_workflow_id"] == long_note.workflow_id
    assert "value too long" in letter["error"]["message"]
    assert [d["payload"]["task"] for d in events_of(records, "test.task_done")] == ["short"]


async def test_an_event_too_large_for_its_topic_is_a_dead_letter_naming_the_field(
    start: Start, kafka_bootstrap: str
) -> None:
    registry, _ = await start()
    topic = registry.physical_topic("test.task_submitted")
    huge = envelope(TaskSubmitted(task="emits 2 MB", mode="huge_emit"))
    after = envelope(TaskSubmitted(task="after"))
    await publish(kafka_bootstrap, topic, [huge, after])
    records = await done_and_dead_lettered(kafka_bootstrap, registry, done=1, letters=1)
    [letter] = letters_for(records)
    assert letter["error"]["error_class"] == "EventTooLargeError"
    assert letter["error"]["pointer"] == "/payload/task"
    assert "its largest field is /payload/task (2,000,000 bytes)" in letter["error"]["message"]
    assert [d["payload"]["task"] for d in events_of(records, "test.task_done")] == ["after"]


async def test_a_submitters_failing_url_never_stops_the_service_however_many_workflows_use_one(
    start: Start, kafka_bootstrap: str
) -> None:
    registry, runner = await start(dead_letter_guard_consecutive=5)
    topic = registry.physical_topic("test.task_submitted")
    # Nothing listens on port 9: every call fails, is retried, and is dead-lettered.
    calls = [
        envelope(TaskSubmitted(task=f"c{i}", mode="call", url="http://127.0.0.1:9/hook")) for i in range(12)
    ]
    await publish(kafka_bootstrap, topic, calls)
    records = await done_and_dead_lettered(kafka_bootstrap, registry, done=0, letters=12, timeout_s=120)
    assert runner.fatal is None
    assert (await runner.health())["status"] == "ok"
    assert {letter["error"]["category"] for letter in letters_for(records)} == {"transient"}
    assert all(letter["attempts"] == 4 for letter in letters_for(records))


async def test_a_record_failing_for_an_infrastructure_reason_is_reported_stuck_and_then_recovers(
    start: Start, kafka_bootstrap: str, pg: asyncpg.Connection, unique: str
) -> None:
    svc = f"svc_{unique}"
    registry, runner = await start(stuck_record_alert_s=1.0)
    # The database refuses for a reason that is not the value: a table is gone.
    await pg.execute(f"ALTER TABLE {svc}.notes RENAME TO notes_away")
    topic = registry.physical_topic("test.task_submitted")
    task = envelope(TaskSubmitted(task="noted", mode="note", note="fine"))
    await publish(kafka_bootstrap, topic, [task])
    health = await wait_until(
        lambda: _degraded(runner), what="the record reported stuck in /health", timeout_s=60
    )
    [stuck] = health["stuck_records"]
    lagging = await wait_until(lambda: _lagging(runner), what="the stuck record counted as lag")
    assert lagging["consumer_lag"] == 1
    assert (stuck["topic"], stuck["partition"], stuck["offset"]) == (topic, 0, 0)
    assert stuck["workflow_key"] == task.workflow_id
    assert "notes" in stuck["error"]
    metrics = runner.metrics.render().decode()
    assert "chorus_records_stuck 1.0" in metrics
    async with httpx.AsyncClient() as client:
        over_http = (await client.get(f"http://127.0.0.1:{runner.http.port}/health")).json()  # type: ignore[union-attr]
    assert over_http["status"] == "degraded"

    port = runner.http.port  # type: ignore[union-attr]
    # The CLI runs its own event loop: off this one, which serves the service.
    result = await asyncio.to_thread(
        CliRunner().invoke, cli, ["status", "--url", f"{svc}=http://127.0.0.1:{port}"]
    )
    assert result.exit_code == 1, result.output
    assert f"{topic}[0]@0" in result.output

    await pg.execute(f"ALTER TABLE {svc}.notes_away RENAME TO notes")
    await read_topic(
        kafka_bootstrap, [topic], until=lambda rs: bool(events_of(rs, "test.task_done")), timeout_s=60
    )
    await wait_until(lambda: _ok(runner), what="the stuck record to leave /health")
    await wait_until(lambda: _caught_up(runner), what="the lag back to 0")
    assert "chorus_records_stuck 0.0" in runner.metrics.render().decode()


async def _degraded(runner: ServiceRunner) -> dict[str, Any] | None:
    health = await runner.health()
    return health if health["status"] == "degraded" else None


async def _lagging(runner: ServiceRunner) -> dict[str, Any] | None:
    health = await runner.health()
    return health if health["consumer_lag"] else None


async def _caught_up(runner: ServiceRunner) -> bool:
    return bool((await runner.health())["consumer_lag"] == 0)


async def _ok(runner: ServiceRunner) -> bool:
    health = await runner.health()
    return bool(health["status"] == "ok")
