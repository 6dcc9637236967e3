"""The outbox relay: publishes committed outbox rows, in id order, then marks them.

One relay per service is active at a time (a PostgreSQL advisory lock held on
its own connection): two relays could interleave one workflow's rows and break
its order. Rows committed out of id order are not skipped, because the relay
reads every undispatched row rather than "everything after the last id".
A crash between publishing and marking republishes those rows; consumers drop
the copies by event id (inbox), which is what makes the whole effectively-once.

The rows a handler's step just committed are published from memory, at once,
rather than after a wake -> SELECT round trip (``publish_committed``): only while
the relay is caught up, i.e. every row committed before its last read of the table
is published. A row only the table knows of (written by an API, a dead letter, a
set-aside row: anything that calls ``wake``), a partition assigned from another
replica, a failed send, a new leadership, and every ``poll_interval_s`` (rows of
other replicas, which never publish themselves) make it read the table first, in
id order, as before. Rows are still marked dispatched after the broker took them,
and a crash between commit and publish leaves them for the next read.

Marks are written on the leader's own connection with ``synchronous_commit = off``: a
mark does not wait for its WAL flush, which on the one-at-a-time path was a second fsync
per hop, beside the next step's commit and competing with it. A mark lost with a crash of
PostgreSQL (the last ~0.6 s of them at most) is a row published again, as after a crash of
the relay between publishing and marking: consumers drop the copy by event id. Nothing
else is ever written on that connection.

A row the broker can never take (larger than its topic's limit, an invalid record)
must not hold back the rows behind it. Rows over the registry's limit are set aside
before sending; a row the broker refuses anyway is found by sending the batch's
failed rows again one at a time. A set-aside row is marked failed and dead-lettered
with its bytes, an alert is counted, and the rest is published in order. After a
refusal the idempotent producer is replaced: its sequence numbers for that partition
are spent (every later send would fail with OutOfOrderSequenceNumber).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Awaitable, Callable

import asyncpg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidTopicError,
    KafkaError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
    RecordListTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

from chorus.base import hoptrace, tracing
from chorus.base.clock import Clock
from chorus.base.errors import PersistentError
from chorus.base.faults import fault_point
from chorus.base.logs import fields
from chorus.base.metrics import Metrics
from chorus.kernel.kafka import stop_client
from chorus.kernel.messaging import published
from chorus.kernel.store import OutboxMessage, OutboxRow
from chorus.kernel.store.postgres import ServiceStore

log = logging.getLogger("chorus.relay")

# The broker's answers that blame one record (or its batch), never the cluster.
RECORD_REFUSALS = (MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError)
# Answers that blame the row's topic: no such topic (after the producer waited its request
# timeout for it to appear, and a metadata answer confirms it: Relay._refused), an invalid
# name, or one this service may not write. Sending the row again alone cannot help, so it is
# set aside at once.
TOPIC_REFUSALS = (UnknownTopicOrPartitionError, InvalidTopicError, TopicAuthorizationFailedError)
REFUSALS = (*RECORD_REFUSALS, *TOPIC_REFUSALS)
METADATA_CHECK_S = 10.0
"""How long a refusal's confirmation waits for the cluster's metadata."""

READ_AHEAD_MEMORY_S = 5.0
READ_AHEAD_MAX = 20_000
"""How long, and how many, rows published by a read are remembered in case their step
hands them over late (microseconds to milliseconds after its commit; a duplicate after
that is dropped by consumers, by event id)."""

ProducerFactory = Callable[[], AIOKafkaProducer]
DeadLetterBuilder = Callable[[OutboxRow, BaseException], Awaitable[OutboxMessage | None]]
"""The dead letter of a set-aside row; None for a row that is itself a dead letter (a
dead letter of a refused dead letter would be refused too, row after row)."""


class RowRefusedError(PersistentError):
    """The broker cannot take this outbox row (too large for its topic, or invalid)."""

    caused_by_input = True


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
        size_limit: Callable[[str], int],
        dead_letter: DeadLetterBuilder,
        new_producer: ProducerFactory | None = None,
        batch_size: int = 500,
        poll_interval_s: float = 0.1,
    ) -> None:
        self.store = store
        self.database_url = database_url
        self.pool = pool
        self.producer = producer
        self.size_limit = size_limit
        self.dead_letter = dead_letter
        self.new_producer = new_producer
        self.clock = clock
        self.metrics = metrics
        self.batch_size = batch_size
        self.poll_interval_s = poll_interval_s
        self._wake = asyncio.Event()
        self._publish_lock = asyncio.Lock()
        self._fresh: list[OutboxRow] = []
        # Rows a read published before their step handed them over (its commit had
        # landed, its coroutine had not resumed yet): id -> when; they must not go twice.
        self._read_ahead: dict[int, float] = {}
        self._caught_up = False
        self._wakes = 0
        self._last_read = 0.0
        self._stopping = False
        self.is_leader = False
        self.published = 0
        self._lock_key = zlib.crc32(f"chorus-relay-{store.schema}".encode())
        self._marks: asyncpg.Connection | None = None
        """The leader's connection, where marks are written (module docstring)."""

    def wake(self) -> None:
        """Something was committed to the outbox that only the table knows of; read it and
        publish it now rather than at the next poll."""
        self._caught_up = False
        self._wakes += 1
        self._wake.set()

    def publish_committed(self, rows: list[OutboxRow]) -> None:
        """A step of this process committed ``rows`` (in order): publish them next, from
        memory when caught up (only the leader publishes; the others' rows are read)."""
        if self.is_leader:
            self._fresh.extend(r for r in rows if self._read_ahead.pop(r.id, None) is None)
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
            await conn.execute("SET synchronous_commit = off")
            self._marks = conn
            self.is_leader = True
            self._caught_up = False  # what the last leader left is read first
            self._fresh.clear()
            while not self._stopping:
                sent = await self.publish_batch()
                if sent == 0:
                    self._wake.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), self.poll_interval_s)
        finally:
            self.is_leader = False
            self._marks = None
            await conn.close()  # releases the advisory lock

    async def publish_batch(self) -> int:
        async with self._publish_lock:  # flush() and the loop must not interleave batches
            try:
                return await self._publish_round()
            except BaseException:
                self._caught_up = False  # what was not sent is in the table
                self._fresh.clear()
                raise

    async def _publish_round(self) -> int:
        loop = asyncio.get_running_loop()
        wakes = self._wakes
        if self._caught_up and loop.time() - self._last_read < self.poll_interval_s:
            rows, self._fresh = self._fresh[: self.batch_size], self._fresh[self.batch_size :]
            caught_up = True
        else:
            self._last_read = loop.time()
            async with self.pool.acquire() as conn:
                rows = await self.store.pending_outbox(conn, self.batch_size)
            # Rows committed here and found by this read go out once, in the read's order;
            # the ones committed after it stay in memory and follow. A row read before its
            # step handed it over must not go again when it is handed over.
            read = {r.id for r in rows}
            self._remember_read_ahead(read - {r.id for r in self._fresh}, self._last_read)
            self._fresh = [r for r in self._fresh if r.id not in read]
            caught_up = len(rows) < self.batch_size
        if rows:
            self._trace("relay_read", rows)
            await self._publish_rows(rows)
        # A wake since the round began (a row only the table knows of) means: read next.
        self._caught_up = caught_up and self._wakes == wakes
        return len(rows)

    def _remember_read_ahead(self, ids: set[int], now: float) -> None:
        """Rows a read took that no step handed over (yet): most are others' (an API's,
        another replica's) and are never handed over, so they are forgotten after a while."""
        for row_id in ids:
            self._read_ahead[row_id] = now
        horizon = now - READ_AHEAD_MEMORY_S
        while self._read_ahead:
            oldest = next(iter(self._read_ahead))
            if self._read_ahead[oldest] >= horizon and len(self._read_ahead) <= READ_AHEAD_MAX:
                break
            del self._read_ahead[oldest]

    async def _publish_rows(self, rows: list[OutboxRow]) -> None:
        sendable = []
        for row in rows:
            limit = self.size_limit(row.topic)
            if row.size > limit:
                await self._set_aside(
                    row, RowRefusedError(f"{row.size:,} bytes, more than the {limit:,} {row.topic} takes")
                )
            else:
                sendable.append(row)
        failed = await self._publish(sendable)
        fault_point("after_publish")
        published = [r for r in sendable if r.id not in failed]
        await self._mark([r.id for r in published])
        self._trace("marked", published)
        self.published += len(published)
        if failed:
            await self._isolate([r for r in sendable if r.id in failed], failed)

    async def _publish(self, rows: list[OutboxRow]) -> dict[int, BaseException]:
        """Send ``rows``; the rows that failed, when the broker refused one of them (a record
        or its topic), with their errors. Any other failure (broker away, timeout) raises:
        nothing is marked, all go again."""
        # send() only enqueues; the idempotent producer keeps per-partition order,
        # so all sends go out before any is awaited.
        started_ns = time.time_ns()  # a span's times are the machine's, as every exporter's
        futures = [await self._send(r) for r in rows]
        self._trace("sent", rows)
        results = await asyncio.gather(*futures, return_exceptions=True)
        self._trace("acked", rows)
        if tracing.building():
            _producer_spans(rows, results, started_ns, time.time_ns())
        refusals = [r for r in results if isinstance(r, REFUSALS)]
        if not refusals:
            for result in results:
                if isinstance(result, BaseException):
                    if isinstance(result, OutOfOrderSequenceNumber):
                        await self._replace_producer()  # a refusal earlier spent the sequence
                    raise result
        for row, result in zip(rows, results, strict=True):
            if not isinstance(result, BaseException):
                self.metrics.events_out.labels(row.topic).inc()
        # After a refusal the rest of that partition failed too (out of sequence):
        # every failed row is tried again, alone, by _isolate.
        return {
            row.id: result
            for row, result in zip(rows, results, strict=True)
            if isinstance(result, BaseException)
        }

    async def _send(self, row: OutboxRow) -> asyncio.Future[object]:
        try:
            future: asyncio.Future[object] = await self.producer.send(
                row.topic, row.value, key=row.key, headers=list(row.headers)
            )
        except REFUSALS as exc:  # refused client-side, before enqueueing
            future = asyncio.get_running_loop().create_future()
            future.set_exception(exc)
        return future

    @staticmethod
    def _trace(stage: str, rows: list[OutboxRow]) -> None:
        if hoptrace.enabled():
            for row in rows:
                hoptrace.mark(stage, row.event_id)

    async def _isolate(self, rows: list[OutboxRow], errors: dict[int, BaseException]) -> None:
        """Send the failed rows of a refused batch one at a time, in order, on a fresh
        producer; set aside each one the broker refuses on its own (or for its topic)."""
        await self._replace_producer()
        for row in rows:
            try:
                if isinstance(errors.get(row.id), TOPIC_REFUSALS):
                    raise errors[row.id]
                await (await self._send(row))
            except REFUSALS as exc:
                if not await self._refused(row, exc):
                    raise  # the broker is out of reach: not a refusal; the round is retried
                await self._set_aside(row, RowRefusedError(f"the broker refused it: {exc!r}"))
                if isinstance(exc, RECORD_REFUSALS):
                    await self._replace_producer()
                continue
            self.metrics.events_out.labels(row.topic).inc()
            await self._mark([row.id])
            self.published += 1

    async def _mark(self, ids: list[int]) -> None:
        """Mark rows dispatched, on the leader's connection: only a leader publishes."""
        assert self._marks is not None, "a relay publishes only while it leads"
        await self.store.mark_dispatched(self._marks, ids, self.clock.now())

    async def _refused(self, row: OutboxRow, exc: BaseException) -> bool:
        """Whether the broker really refused ``row``. aiokafka raises "unknown topic" also
        when no broker answered its metadata requests for a request timeout (a network
        partition; seen in the reliability suite: a committed row dead-lettered): only a
        metadata answer that lacks the topic confirms it is missing."""
        if not isinstance(exc, UnknownTopicOrPartitionError):
            return True
        try:
            cluster = await asyncio.wait_for(self.producer.client.fetch_all_metadata(), METADATA_CHECK_S)
        except (KafkaError, OSError, asyncio.TimeoutError):
            return False
        return row.topic not in cluster.topics()

    async def _set_aside(self, row: OutboxRow, error: RowRefusedError) -> None:
        message = await self.dead_letter(row, error)
        async with self.pool.acquire() as conn, conn.transaction():
            await self.store.mark_failed(conn, row.id, str(error), self.clock.now())
            if message is not None:
                await self.store.add_outbox(conn, [message])
        self.metrics.outbox_refused.labels(row.topic).inc()
        log.error(
            "outbox row refused; dead-lettered it and publishing the rest",
            extra=fields(outbox_id=row.id, topic=row.topic, bytes=row.size, error=str(error)),
        )
        self.wake()

    async def _replace_producer(self) -> None:
        if self.new_producer is None:
            return
        fresh = self.new_producer()
        await fresh.start()  # raises while the broker is away: the round is retried later
        old, self.producer = self.producer, fresh
        with contextlib.suppress(Exception):
            await stop_client(old)

    async def flush(self, timeout_s: float = 30.0) -> None:
        """Publish everything committed so far (graceful shutdown). Only the leader publishes."""
        if not self.is_leader:
            return
        self._caught_up = False  # read the table once, whatever memory holds
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if await self.publish_batch() == 0:
                return
        log.warning("outbox not empty after %.0fs of flushing; the next start publishes the rest", timeout_s)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()


def _producer_spans(rows: list[OutboxRow], results: list[object], start_ns: int, end_ns: int) -> None:
    """A PRODUCER span per published row, child of the span that emitted its event."""
    for row, result in zip(rows, results, strict=True):
        if isinstance(result, BaseException):
            continue
        traceparent = dict(row.headers).get("traceparent", b"").decode("ascii", "replace")
        partition, offset = getattr(result, "partition", -1), getattr(result, "offset", -1)
        name, attributes = published(row.topic, str(row.event_id or ""), partition, offset)
        tracing.ended_span(name, traceparent, "producer", attributes, start_ns, end_ns)
