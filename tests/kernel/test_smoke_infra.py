"""aiokafka 0.14 against the real Kafka 4.x broker and asyncpg against real PostgreSQL.

These prove the guarantees the runtime builds on, before any Chorus code is involved.
"""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from chorus.kernel.kafka import make_consumer, make_producer
from chorus.testing.stack import ensure_topics

pytestmark = pytest.mark.integration


async def drain(consumer: AIOKafkaConsumer, want: int, timeout_s: float = 20.0) -> list[bytes]:
    """Read until ``want`` values arrived or the timeout passed."""
    values: list[bytes] = []
    deadline = asyncio.get_running_loop().time() + timeout_s
    while len(values) < want and asyncio.get_running_loop().time() < deadline:
        batches = await consumer.getmany(timeout_ms=200)
        for records in batches.values():
            values.extend(r.value for r in records if r.value is not None)
    return values


async def test_idempotent_producer_round_trip(kafka_bootstrap: str, unique: str) -> None:
    topic = f"smoke.idem.{unique}"
    await ensure_topics(kafka_bootstrap, [(topic, 1)])
    sent = [json.dumps({"n": i}).encode() for i in range(50)]
    async with make_producer(kafka_bootstrap) as producer:
        for value in sent:
            await producer.send(topic, value, key=b"wf-1")
        await producer.flush()

    async with make_consumer(kafka_bootstrap, topic, group_id=None) as consumer:
        got = await drain(consumer, 50)
    assert got == sent  # all of them, once each, in order


async def test_group_resumes_exactly_after_last_commit(kafka_bootstrap: str, unique: str) -> None:
    topic, group = f"smoke.resume.{unique}", f"g-{unique}"
    await ensure_topics(kafka_bootstrap, [(topic, 1)])
    async with make_producer(kafka_bootstrap) as producer:
        for i in range(20):
            await producer.send(topic, str(i).encode())
        await producer.flush()

    tp = TopicPartition(topic, 0)
    async with make_consumer(kafka_bootstrap, topic, group_id=group, max_poll_records=7) as first:
        seen: list[bytes] = []
        while len(seen) < 7:
            for records in (await first.getmany(tp, timeout_ms=500, max_records=7 - len(seen))).values():
                seen.extend(r.value for r in records if r.value is not None)
        # Processed 0..6: commit offset 7 (the next one to read), then "crash" after reading more.
        await first.commit({tp: 7})
        await first.getmany(timeout_ms=500)

    async with make_consumer(kafka_bootstrap, topic, group_id=group) as second:
        rest = await drain(second, 13)
    assert [int(v) for v in seen] == list(range(7))
    assert [int(v) for v in rest] == list(range(7, 20))


async def test_transaction_with_offsets_hides_aborted_messages(kafka_bootstrap: str, unique: str) -> None:
    source, sink, group = f"smoke.tx.in.{unique}", f"smoke.tx.out.{unique}", f"g-{unique}"
    await ensure_topics(kafka_bootstrap, [(source, 1), (sink, 1)])
    async with make_producer(kafka_bootstrap) as plain:
        for i in range(4):
            await plain.send(source, f"in-{i}".encode())
        await plain.flush()

    tp = TopicPartition(source, 0)
    consumer = make_consumer(kafka_bootstrap, source, group_id=group)
    txp = make_producer(kafka_bootstrap, transactional_id=f"tx-{unique}-{source}-0")
    await consumer.start()
    await txp.start()
    try:
        records: list[ConsumerRecord[bytes, bytes]] = []
        while len(records) < 4:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
        # Commit the first two through a transaction, abort the last two.
        async with txp.transaction():
            for r in records[:2]:
                await txp.send(sink, b"out-" + r.value)
            await txp.send_offsets_to_transaction({tp: records[1].offset + 1}, group)
        with pytest.raises(RuntimeError, match="boom"):
            async with txp.transaction():
                for r in records[2:]:
                    await txp.send(sink, b"aborted-" + r.value)
                raise RuntimeError("boom")
    finally:
        await txp.stop()
        await consumer.stop()

    async with make_consumer(kafka_bootstrap, sink, group_id=None) as reader:
        out = await drain(reader, 3, timeout_s=5)
    assert out == [b"out-in-0", b"out-in-1"]

    # The group's committed offset moved with the committed transaction only.
    async with make_consumer(kafka_bootstrap, source, group_id=group) as check:
        assert await check.committed(tp) == 2


async def test_asyncpg_round_trip(pg: asyncpg.Connection, unique: str) -> None:
    table = f"smoke_{unique}"
    await pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, body jsonb NOT NULL)")
    try:
        async with pg.transaction():
            await pg.execute(f"INSERT INTO {table} VALUES ($1, $2::jsonb)", 1, '{"ok": true}')
        row = await pg.fetchrow(f"SELECT id, body FROM {table}")
        assert row is not None
        assert (row["id"], json.loads(row["body"])) == (1, {"ok": True})
    finally:
        await pg.execute(f"DROP TABLE {table}")
