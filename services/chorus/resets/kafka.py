"""Reading one record again from where it was (a reset's point): the original bytes, as its
producer signed them, straight from its topic."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiokafka import TopicPartition

from chorus.base.errors import TransientError
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

    async def read(self, at: Position) -> Record:
        """The record at ``at``. Refused when the topic no longer holds it (its retention
        passed); TransientError when it could not be read in time (tried again later)."""
        consumer = make_consumer(self.bootstrap, group_id=None, client_id=f"{self.client_id}-resets")
        try:
            await start_kafka(consumer.start(), self.bootstrap, [at.topic])
            tp = TopicPartition(at.topic, at.partition)
            consumer.assign([tp])
            first = (await consumer.beginning_offsets([tp]))[tp]
            if at.offset < first:
                raise Gone(
                    f"the point's event is no longer on {at.topic} (partition {at.partition}, offset "
                    f"{at.offset}; the log starts at {first}): its retention passed, so it cannot be "
                    "handled again"
                )
            consumer.seek(tp, at.offset)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.timeout_s
            while loop.time() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=500, max_records=1)
                for r in batch.get(tp, []):
                    if r.offset != at.offset:  # compacted away, or a transaction's marker
                        raise Gone(f"no record at {at.topic}:{at.partition}:{at.offset} any more")
                    return Record(
                        r.topic, r.partition, r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp
                    )
            raise TransientError(
                f"{at.topic}:{at.partition}:{at.offset} not read within {self.timeout_s:.0f}s"
            )
        finally:
            await stop_client(consumer)


class Gone(Exception):
    """The record is no longer on its topic."""
