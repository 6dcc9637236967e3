"""A service's record path without Kafka: records go into the chain, events come out of
the store's outbox. The same tests run it on the memory store and on PostgreSQL.

``KernelUnderTest.bus()`` plays the broker and the timer service between steps: it hands
back, as records, what the service published onto the topics it reads itself (its own
follow-up events) and the durable retries it scheduled (fired at once, as the timer
service would when they fall due).
"""

from __future__ import annotations

import base64
import itertools
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from chorus.base.clock import ManualClock
from chorus.base.metrics import Metrics
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.registry import Registry
from chorus.kernel.codec import encode
from chorus.kernel.guard import DeadLetterGuard
from chorus.kernel.outbox import envelope_headers
from chorus.kernel.recordpath import Identity, Plugs, Wiring, assembled, letters_for
from chorus.kernel.records import Record
from chorus.kernel.service import ServiceSpec
from chorus.kernel.store import OutboxRow, Store
from chorus.kernel.store.postgres import PgStore
from chorus.testing.memory import MemoryStore


@dataclass
class KernelUnderTest:
    spec: ServiceSpec[Any, Any]
    registry: Registry
    store: Store = field(default_factory=MemoryStore)
    clock: ManualClock = field(
        default_factory=lambda: ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc))
    )
    plugs: Plugs = field(default_factory=Plugs)
    guard_after: int = 25
    committed: list[OutboxRow] = field(default_factory=list)
    _offsets: itertools.count[int] = field(default_factory=itertools.count)
    _seen: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.metrics = Metrics(self.spec.name)
        self.identity = Identity(
            self.spec.name, ProducerRef(service=self.spec.name, version=self.spec.version)
        )
        wiring = Wiring(
            self.spec, self.registry, self.store, self.clock, self.metrics, self.identity, None,
            DeadLetterGuard(max_consecutive=self.guard_after), None, 1_048_576,
        )  # fmt: skip
        self.letters = letters_for(wiring, None, lambda: None)
        self.steps, self.chain = assembled(
            wiring, self.letters, self.plugs, on_committed=self.committed.extend
        )

    async def close(self) -> None:
        await self.steps.load.close()
        await self.steps.commit.close()

    def record(
        self, envelope: Envelope | bytes, *, topic: str | None = None, key: bytes | None = None
    ) -> Record:
        """``envelope`` as the broker hands it over: on its topic, keyed by its workflow."""
        if isinstance(envelope, Envelope):
            topic = topic or self.registry.physical_topic(envelope.event_type, envelope.priority)
            key = key or envelope.workflow_id.encode()
            value, headers = encode(envelope), tuple(envelope_headers(envelope))
        else:
            value, headers = envelope, ()
        assert topic is not None, "raw bytes need a topic"
        return Record(topic, 0, next(self._offsets), key, value, headers, timestamp_ms=0)

    async def deliver(self, *items: Envelope | Record) -> None:
        for item in items:
            await self.chain.run(item if isinstance(item, Record) else self.record(item))

    async def outbox(self) -> list[OutboxRow]:
        """Every row the steps committed to the outbox (no relay takes them here)."""
        if isinstance(self.store, MemoryStore):
            return list(self.store.outbox)
        assert isinstance(self.store, PgStore)
        async with self.store.pool.acquire() as conn:
            return await self.store.sql.pending_outbox(conn, 100_000)

    async def events(self, event_type: str) -> list[dict[str, Any]]:
        """What the service published of ``event_type`` (envelopes as JSON)."""
        found = [json.loads(row.value) for row in await self.outbox()]
        return [e for e in found if e["event_type"] == event_type]

    async def bus(self) -> list[Record]:
        """Records the service would read next: its retries fired and what it published to
        itself, each once."""
        out = []
        for row in await self.outbox():
            if row.id in self._seen:
                continue
            self._seen.add(row.id)
            envelope = json.loads(row.value)
            if envelope["event_type"] == "timer.schedule" and envelope["payload"]["purpose"] == "retry":
                fire = envelope["payload"]["fire"]
                out.append(
                    self.record(
                        json.dumps(fire["value"]).encode(), topic=fire["topic"], key=fire["key"].encode()
                    )
                )
            elif envelope["event_type"] in self.spec.consumes():
                out.append(Record(row.topic, 0, next(self._offsets), row.key, row.value, tuple(row.headers)))
        return out

    async def settle(self, rounds: int = 20) -> None:
        """Deliver what the bus holds until it holds nothing."""
        for _ in range(rounds):
            pending = await self.bus()
            if not pending:
                return
            await self.deliver(*pending)
        raise AssertionError(f"still busy after {rounds} rounds")


def original_bytes(letter: dict[str, Any]) -> bytes:
    """The bytes a dead letter carries (unsealed: the kernel alone seals nothing)."""
    return base64.b64decode(letter["payload"]["original"]["value_b64"])
