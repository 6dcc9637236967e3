"""The outbox relay on a real broker.

An outbox row the broker cannot take is set aside and dead-lettered with its bytes; the
rows queued behind it are published, in order. It used to stop the relay for good.

Rows a step just committed go out from memory (no read of the table first), but never
ahead of rows only the table knows of: those a crash or another replica left, or an API
wrote.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from chorus.contracts.registry import Registry
from chorus.kernel.store import OutboxMessage, OutboxRow
from chorus.kernel.store.postgres import ServiceStore
from chorus.runtime.runner import ServiceRunner, ServiceSettings, running
from chorus.testing.stack import ensure_topics
from tests.support.kafka import events_of, read_topic
from tests.support.registry import CREATED_TOPICS, isolated_registry
from tests.support.sealed import opened
from tests.support.testservice import make_spec

pytestmark = pytest.mark.integration

KEY = b"wf-relay"


def rows(topic: str, values: list[bytes]) -> list[OutboxMessage]:
    return [OutboxMessage(topic=topic, key=KEY, value=v, headers=[("h", b"1")]) for v in values]


def numbered(first: int, count: int) -> list[bytes]:
    return [json.dumps({"n": n}).encode() for n in range(first, first + count)]


async def run_with_rows(runner: ServiceRunner, messages: list[OutboxMessage]) -> None:
    assert runner.pool is not None and runner.relay is not None
    async with runner.pool.acquire() as conn, conn.transaction():
        await runner.store.add_outbox(conn, messages)
    runner.relay.wake()


async def committed(runner: ServiceRunner, topic: str, values: list[bytes]) -> list[OutboxRow]:
    """Rows committed as a step commits them (with their ids), not yet handed to the relay."""
    assert runner.pool is not None
    out = []
    async with runner.pool.acquire() as conn, conn.transaction():
        for v in values:
            row_id = await conn.fetchval(
                f"""INSERT INTO {runner.store.schema}.outbox (topic, key, value)
                    VALUES ($1, $2, $3) RETURNING id""",
                topic,
                KEY,
                v,
            )
            out.append(OutboxRow(row_id, topic, KEY, v, []))
    return out


async def caught_up_leader(runner: ServiceRunner) -> None:
    """Wait until the relay leads and has read the table once (it starts by reading)."""
    assert runner.relay is not None
    for _ in range(200):
        if runner.relay.is_leader and await runner.relay.publish_batch() == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the relay never led")


def published_numbers(records: list[Any], topic: str) -> list[int]:
    numbers = []
    for r in records:
        if r.topic == topic:
            numbers.append(json.loads(r.value)["n"])
    return numbers


def letters(records: list[Any]) -> list[dict[str, Any]]:
    return [e["payload"] for e in events_of(records, "event.dead_lettered")]


@pytest.fixture
async def service(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> AsyncIterator[tuple[Registry, ServiceRunner]]:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    settings = ServiceSettings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False)
    async with running(make_spec(f"svc_{unique}"), settings, registry=registry) as runner:
        yield registry, runner


async def test_a_row_over_its_topics_limit_is_set_aside_and_the_500_behind_it_are_published_in_order(
    service: tuple[Registry, ServiceRunner], kafka_bootstrap: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry, runner = service
    topic = registry.physical_topic("invoice.received")  # nobody consumes it in this test
    big = b"x" * (registry.publish_limit(topic) + 1)
    await run_with_rows(runner, rows(topic, [*numbered(0, 1), big, *numbered(1, 500)]))
    dlq = registry.physical_topic("event.dead_lettered")
    records = await read_topic(
        kafka_bootstrap,
        [topic, dlq],
        until=lambda rs: len(published_numbers(rs, topic)) >= 501 and bool(letters(rs)),
    )
    assert published_numbers(records, topic) == list(range(501))
    [letter] = letters(records)
    assert base64.b64decode(opened(letter["original"])["value_b64"]) == big
    assert opened(letter["original"])["outbox_row"].startswith(f"svc_{unique}/")
    assert opened(letter["original"])["topic"] == topic
    assert "more than the" in letter["error"]["message"]
    failed = await pg.fetch(f"SELECT failure FROM svc_{unique}.outbox WHERE failed_at IS NOT NULL")
    assert len(failed) == 1
    assert f'chorus_outbox_refused_total{{topic="{topic}"}} 1.0' in runner.metrics.render().decode()


async def test_a_row_the_broker_refuses_is_isolated_and_the_rest_of_its_partition_follows_in_order(
    service: tuple[Registry, ServiceRunner], kafka_bootstrap: str, unique: str
) -> None:
    registry, runner = service
    # A topic whose broker limit is smaller than the registry believes (a misconfiguration):
    # the broker refuses the record, and the idempotent producer's sequence is spent.
    topic = f"relay.small.{unique}.{uuid.uuid4().hex[:6]}"
    await ensure_topics(kafka_bootstrap, [(topic, 1)], configs={"max.message.bytes": "20000"})
    CREATED_TOPICS.append(topic)
    refused = b"y" * 50_000
    await run_with_rows(runner, rows(topic, [*numbered(0, 5), refused, *numbered(5, 20)]))
    records = await read_topic(
        kafka_bootstrap,
        [topic, registry.physical_topic("event.dead_lettered")],
        until=lambda rs: len(published_numbers(rs, topic)) >= 25 and bool(letters(rs)),
    )
    assert published_numbers(records, topic) == list(range(25))
    [letter] = letters(records)
    assert base64.b64decode(opened(letter["original"])["value_b64"]) == refused
    assert "MessageSizeTooLarge" in letter["error"]["message"]
    # The relay goes on with a fresh producer: later rows flow too.
    await run_with_rows(runner, rows(topic, numbered(25, 3)))
    later = await read_topic(
        kafka_bootstrap, [topic], until=lambda rs: len(published_numbers(rs, topic)) >= 28
    )
    assert published_numbers(later, topic) == list(range(28))


async def test_a_row_for_a_topic_that_does_not_exist_is_set_aside_and_the_rest_flows(
    service: tuple[Registry, ServiceRunner], kafka_bootstrap: str, unique: str
) -> None:
    """A timer or a redrive may name any topic; the broker has none of that name (the
    producer waits its request timeout, 30 s, before it says so)."""
    registry, runner = service
    topic = registry.physical_topic("invoice.received")
    missing = f"no.such.topic.{unique}"
    await run_with_rows(runner, [*rows(missing, [b"lost?"]), *rows(topic, numbered(0, 10))])
    records = await read_topic(
        kafka_bootstrap,
        [topic, registry.physical_topic("event.dead_lettered")],
        until=lambda rs: len(published_numbers(rs, topic)) >= 10 and bool(letters(rs)),
        timeout_s=120,
    )
    assert published_numbers(records, topic) == list(range(10))
    [letter] = letters(records)
    assert opened(letter["original"])["topic"] == missing
    assert base64.b64decode(opened(letter["original"])["value_b64"]) == b"lost?"
    assert "UnknownTopicOrPartition" in letter["error"]["message"]


async def test_rows_a_step_committed_go_out_from_memory_after_what_the_table_held(
    service: tuple[Registry, ServiceRunner], kafka_bootstrap: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry, runner = service
    assert runner.relay is not None
    topic = registry.physical_topic("invoice.received")
    await caught_up_leader(runner)
    # Left in the table, never handed to the relay: a crash between commit and publish,
    # or rows of the replica this partition came from.
    await committed(runner, topic, numbered(0, 3))
    runner.relay.wake()  # what a partition assignment does (KafkaEdge.on_assigned)
    runner.relay.publish_committed(await committed(runner, topic, numbered(3, 3)))
    records = await read_topic(
        kafka_bootstrap, [topic], until=lambda rs: len(published_numbers(rs, topic)) >= 6
    )
    assert published_numbers(records, topic) == list(range(6))  # in order, each once
    schema = ServiceStore(f"svc_{unique}").schema
    for _ in range(100):  # marked after the broker took them
        if await pg.fetchval(f"SELECT count(*) FROM {schema}.outbox WHERE dispatched_at IS NULL") == 0:
            break
        await asyncio.sleep(0.05)
    assert await pg.fetchval(f"SELECT count(*) FROM {schema}.outbox WHERE dispatched_at IS NOT NULL") == 6


async def test_a_row_only_the_table_knows_of_keeps_its_place_between_rows_from_memory(
    service: tuple[Registry, ServiceRunner], kafka_bootstrap: str
) -> None:
    registry, runner = service
    assert runner.relay is not None
    topic = registry.physical_topic("invoice.received")
    await caught_up_leader(runner)
    runner.relay.publish_committed(await committed(runner, topic, numbered(0, 1)))
    await run_with_rows(runner, rows(topic, numbered(1, 1)))  # an API's row: table + wake
    runner.relay.publish_committed(await committed(runner, topic, numbered(2, 1)))
    records = await read_topic(
        kafka_bootstrap, [topic], until=lambda rs: len(published_numbers(rs, topic)) >= 3
    )
    assert published_numbers(records, topic) == [0, 1, 2]


async def test_a_row_a_read_published_before_its_step_handed_it_over_goes_once(
    service: tuple[Registry, ServiceRunner],
) -> None:
    """The commit has landed, the step's coroutine has not resumed yet, and a read takes
    the row; when the step then hands it over, it is not published again."""
    registry, runner = service
    assert runner.relay is not None
    topic = registry.physical_topic("invoice.received")
    await caught_up_leader(runner)
    rows_ = await committed(runner, topic, numbered(0, 3))
    before = runner.relay.published
    runner.relay.wake()
    await runner.relay.publish_batch()  # the read
    runner.relay.publish_committed(rows_)  # the late hand-over
    await runner.relay.publish_batch()
    await runner.relay.publish_batch()
    assert runner.relay.published - before == 3
