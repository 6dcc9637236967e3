"""decode: the record's bytes to a typed event, or the record's dead letter (input never stalls)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from chorus.base.errors import DecodeError
from chorus.base.metrics import Metrics
from chorus.contracts.registry import Registry
from chorus.kernel.chain import Done, Finish, Item, Via
from chorus.kernel.codec import decode
from chorus.kernel.kafka_records import check_headers
from chorus.kernel.steps.letters import Letters


@dataclass
class Decode:
    registry: Registry
    accept: Mapping[str, int]
    """Event type -> the version this service's code reads (its handlers' and control's)."""
    max_bytes: int
    metrics: Metrics
    letters: Letters
    name: str = "decode"

    async def __call__(self, item: Item) -> Item | Done:
        rec = item.record
        limit = self.registry.size_limit(rec.topic, self.max_bytes)
        delivered = item.via is Via.DELIVERY  # counted once, as read from its topic
        try:
            check_headers(rec.headers)
            item.event = decode(rec.value, self.registry, accept=self.accept, max_bytes=limit)
        except DecodeError as exc:
            if delivered:
                self.metrics.events_in.labels(rec.topic, "undecodable").inc()
            # A parked record that no longer decodes (the registry changed under it) is let go of.
            await self.letters.record(rec, exc, parked_id=item.parked_id)
            return Done(Finish.DEAD_LETTERED)
        if delivered:
            self.metrics.events_in.labels(rec.topic, item.event.event_type).inc()
        return item
