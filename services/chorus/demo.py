"""`make demo`: a visible round trip through the real local stack.

Creates a topic, produces one versioned event, consumes it, stores it in
PostgreSQL and prints each step. The reference workflows replace this once
they exist.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime

import asyncpg

from chorus.kafka import ensure_topics, make_consumer, make_producer
from chorus.settings import ChorusSettings


async def round_trip(settings: ChorusSettings) -> None:
    topic = "demo.roundtrip"
    await ensure_topics(settings.kafka_bootstrap, [(topic, 1)])
    print(f"1. topic {topic!r} exists on {settings.kafka_bootstrap}")

    event = {
        "event_id": str(uuid.uuid4()),
        "event_type": "demo.pinged",
        "schema_version": 1,
        "occurred_at": datetime.now(UTC).isoformat(),
        "payload": {"message": "hello from chorus"},
    }
    producer = make_producer(settings.kafka_bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, json.dumps(event).encode(), key=b"demo")
    finally:
        await producer.stop()
    print(f"2. produced {event['event_type']} v1 {event['event_id']} at offset {meta.offset}")

    consumer = make_consumer(settings.kafka_bootstrap, topic, group_id=None)
    await consumer.start()
    try:
        received = None
        while received is None:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    if json.loads(record.value)["event_id"] == event["event_id"]:
                        received = record
    finally:
        await consumer.stop()
    print(f"3. consumed it back from partition {received.partition} offset {received.offset}")

    conn = await asyncpg.connect(settings.database_url)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS demo_roundtrip (event_id uuid PRIMARY KEY, body jsonb)"
        )
        await conn.execute(
            "INSERT INTO demo_roundtrip VALUES ($1, $2::jsonb) ON CONFLICT DO NOTHING",
            uuid.UUID(event["event_id"]),
            received.value.decode(),
        )
        count = await conn.fetchval("SELECT count(*) FROM demo_roundtrip")
    finally:
        await conn.close()
    print(f"4. stored in PostgreSQL table demo_roundtrip ({count} row(s) in total)")


def main() -> None:
    asyncio.run(round_trip(ChorusSettings()))


if __name__ == "__main__":
    main()
