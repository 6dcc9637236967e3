"""The outbox relay: publishes committed outbox rows, in id order, then marks them.

One relay per service is active at a time (a PostgreSQL advisory lock held on
its own connection): two relays could interleave one workflow's rows and break
its order. Rows committed out of id order are not skipped, because the relay
reads every undispatched row rather than "everything after the last id".
A crash between publishing and marking republishes those rows; consumers drop
the copies by event id (inbox), which is what makes the whole effectively-once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib

import asyncpg
from aiokafka import AIOKafkaProducer

from chorus.clock import Clock
from chorus.faults import fault_point
from chorus.metrics import Metrics
from chorus.store import OutboxRow, ServiceStore

log = logging.getLogger("chorus.relay")


class OutboxRelay:
    def __init__(
        self,
        *,
        store: ServiceStore,
        database_url: str,
        pool: asyncpg.Pool,
        producer: AIOKafkaProducer,
        clock: Clock,
        metrics: Metrics,
        batch_size: int = 500,
        poll_interval_s: float = 0.1,
    ) -> None:
        self.store = store
        self.database_url = database_url
        self.pool = pool
        self.producer = producer
        self.clock = clock
        self.metrics = metrics
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self._wake = asyncio.Event()
        self._publish_lock = asyncio.Lock()
        self._stopping = False
        self.is_leader = False
        self.published = 0
        self._lock_key = zlib.crc32(f"chorus-relay-{store.schema}".encode())

    def wake(self) -> None:
        """Something was committed to the outbox; publish it now rather than at the next poll."""
        self._wake.set()

    async def run(self) -> None:
        """Lead when possible and publish until stopped; survives database and broker outages."""
        backoff = 0.2
        while not self._stopping:
            try:
                await self._lead()
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.is_leader = False
                log.warning("outbox relay interrupted (%r); retrying in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _lead(self) -> None:
        conn = await asyncpg.connect(self.database_url)
        try:
            while not self._stopping:
                if await conn.fetchval("SELECT pg_try_advisory_lock($1)", self._lock_key):
                    break
                await asyncio.sleep(1.0)  # another replica relays; stand by
            self.is_leader = True
            while not self._stopping:
                sent = await self.publish_batch()
                if sent == 0:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), self.poll_interval_s)
        finally:
            self.is_leader = False
            await conn.close()  # releases the advisory lock

    async def publish_batch(self) -> int:
        async with self._publish_lock:  # flush() and the loop must not interleave batches
            async with self.pool.acquire() as conn:
                rows = await self.store.pending_outbox(conn, self.batch_size)
            if not rows:
                return 0
            await self._publish(rows)
            fault_point("after_publish")
            async with self.pool.acquire() as conn:
                await self.store.mark_dispatched(conn, [r.id for r in rows], self.clock.now())
            self.published += len(rows)
            return len(rows)

    async def _publish(self, rows: list[OutboxRow]) -> None:
        # send() only enqueues; the idempotent producer keeps per-partition order,
        # so all sends go out before any is awaited.
        futures = [
            await self.producer.send(r.topic, r.value, key=r.key, headers=list(r.headers)) for r in rows
        ]
        await asyncio.gather(*futures)
        for r in rows:
            self.metrics.events_out.labels(r.topic).inc()

    async def flush(self, timeout_s: float = 30.0) -> None:
        """Publish everything committed so far (graceful shutdown). Only the leader publishes."""
        if not self.is_leader:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if await self.publish_batch() == 0:
                return
        log.warning("outbox not empty after %.0fs of flushing; the next start publishes the rest", timeout_s)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
