"""Reading one record again from where it was (a reset's point): the original bytes, as its
producer signed them, straight from its topic."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiokafka import TopicPartition

from chorus.kernel.kafka import make_consumer, stop_client
from chorus.kernel.records import Record
from chorus.kernel.runner import start_kafka
from chorus.kernel.store import Position

log = logging.getLogger("chorus.resets")


@dataclass(frozen=True)
class KafkaReader:
    bootstrap: str
    client_id: str
    timeout_s: float = 10.0

    async def read(self, at: Position) -> Record | None:
        """The record at ``at``; None when the topic no longer holds it (its retention passed)."""
        consumer = make_consumer(self.bootstrap, group_id=None, client_id=f"{self.client_id}-resets")
        await start_kafka(consumer.start(), self.bootstrap, [at.topic])
        try:
            tp = TopicPartition(at.topic, at.partition)
            consumer.assign([tp])
            consumer.seek(tp, at.offset)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.timeout_s
            while loop.time() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=500, max_records=1)
                for r in batch.get(tp, []):
                    if r.offset != at.offset:
                        return None  # gone: the log starts after it now
                    return Record(
                        r.topic, r.partition, r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp
                    )
            return None
        finally:
            await stop_client(consumer)
