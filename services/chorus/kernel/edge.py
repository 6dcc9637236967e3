"""The Kafka edge of a service: poll, hand records to the dispatcher, commit offsets last.

The poll loop never waits for handlers. It keeps calling ``getmany`` (so the
group never sees a missed ``max.poll.interval`` however long an LLM call takes)
and pauses a partition when too many of its records are still in flight.
Offsets are committed only up to the longest finished prefix of each partition,
after the records' outcomes are committed in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from chorus.base import hoptrace
from chorus.base.metrics import Metrics
from chorus.kernel.kafka import stop_client
from chorus.kernel.lanes import Dispatcher, Work
from chorus.kernel.offsets import PartitionOffsets
from chorus.kernel.records import Record

log = logging.getLogger("chorus.consumer")


class KafkaEdge(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        topics: list[str],
        dispatcher: Dispatcher,
        metrics: Metrics,
        priority_of: Callable[[str], str],
        *,
        max_buffered_per_partition: int = 200,
        commit_interval_s: float = 0.5,
        poll_records: int = 500,
        on_assigned: Callable[[], None] | None = None,
    ) -> None:
        self.consumer = consumer
        self.topics = topics
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.priority_of = priority_of
        self.max_buffered = max_buffered_per_partition
        self.commit_interval_s = commit_interval_s
        self.poll_records = poll_records
        self.on_assigned = on_assigned
        self._offsets: dict[TopicPartition, PartitionOffsets] = {}
        # Records handed to the dispatcher and not finished yet, per partition, so a
        # revocation can cancel those that have not started (finished ones leave at once).
        self._works: dict[TopicPartition, dict[int, Work]] = {}
        self._paused: set[TopicPartition] = set()
        self._stopping = False
        self.rebalances = 0
        self.polled = 0
        self.lag: dict[TopicPartition, int] = {}
        """Records not yet committed, per assigned partition (as of the last commit round)."""

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self.consumer.subscribe(self.topics, listener=self)
        await self.consumer.start()

    async def run(self) -> None:
        commit_task = asyncio.create_task(self._commit_loop(), name="commit-loop")
        try:
            while not self._stopping:
                batches = await self.consumer.getmany(timeout_ms=100, max_records=self.poll_records)
                self.polled += 1
                fetched = hoptrace.now()
                for tp, records in batches.items():
                    tracker = self._offsets.get(tp)
                    if tracker is None:  # assigned between poll and now: track from here
                        tracker = self._offsets[tp] = PartitionOffsets()
                    for r in records:
                        self._submit(tp, tracker, r, fetched)
                self._apply_backpressure()
        finally:
            commit_task.cancel()
            await asyncio.gather(commit_task, return_exceptions=True)

    def stop_polling(self) -> None:
        self._stopping = True

    async def stop(self) -> None:
        self._stopping = True
        await self.commit()
        await stop_client(self.consumer)  # leaves the group so partitions move at once

    # -- records -----------------------------------------------------------------------------

    def _submit(self, tp: TopicPartition, tracker: PartitionOffsets, r: object, fetched: int = 0) -> None:
        record = Record(
            topic=r.topic,  # type: ignore[attr-defined]
            partition=r.partition,  # type: ignore[attr-defined]
            offset=r.offset,  # type: ignore[attr-defined]
            key=r.key,  # type: ignore[attr-defined]
            value=r.value,  # type: ignore[attr-defined]
            headers=tuple(r.headers or ()),  # type: ignore[attr-defined]
            timestamp_ms=r.timestamp,  # type: ignore[attr-defined]
            fetched_ns=fetched,
        )
        tracker.track(record.offset)
        works = self._works.setdefault(tp, {})

        def done(
            t: PartitionOffsets = tracker, offset: int = record.offset, w: dict[int, Work] = works
        ) -> None:
            t.finish(offset)
            w.pop(offset, None)

        work = Work(record, self.priority_of(record.topic), on_done=done)
        works[record.offset] = work
        self.dispatcher.submit(work)

    def _apply_backpressure(self) -> None:
        for tp, tracker in self._offsets.items():
            if tp not in self._paused and tracker.in_flight >= self.max_buffered:
                self.consumer.pause(tp)
                self._paused.add(tp)
            elif tp in self._paused and tracker.in_flight <= self.max_buffered // 2:
                self.consumer.resume(tp)
                self._paused.discard(tp)

    # -- offsets -------------------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.commit_interval_s)
            try:
                await self.commit()
                await self._update_lag()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let a hiccup end the loop that commits offsets
                log.warning("offset commit round failed (%r); retrying", exc)

    async def commit(self) -> None:
        offsets = {}
        for tp, tracker in self._offsets.items():
            offset = tracker.to_commit()
            if offset is not None:
                offsets[tp] = offset
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except (CommitFailedError, KafkaError) as exc:
            # A rebalance took the partitions; the new owner resumes from the last
            # successful commit and the inbox drops what we already handled.
            log.warning("offset commit failed (%r); records will be redelivered and deduplicated", exc)
            return
        for tp, offset in offsets.items():
            self._offsets[tp].committed(offset)

    async def _update_lag(self) -> None:
        """Queue depth per partition: records in the log not yet committed by this group."""
        for tp, tracker in list(self._offsets.items()):
            highwater = self.consumer.highwater(tp)
            if highwater is None:
                continue
            committed = tracker.last_committed
            if committed is None:
                try:
                    committed = await self.consumer.committed(tp)
                except KafkaError:
                    continue
                if committed is not None:
                    tracker.committed(committed)
            depth = max(0, highwater - (committed or 0))
            self.lag[tp] = depth
            self.metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(depth)

    # -- rebalance listener (awaited by aiokafka before it rejoins) ------------------------------

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.rebalances += 1
        await self.commit()
        for tp in revoked:
            for work in self._works.pop(tp, {}).values():
                work.cancelled = True  # not started yet: the next owner handles it
            self._offsets.pop(tp, None)
            self._paused.discard(tp)
            with contextlib.suppress(KeyError):  # never reported
                self.metrics.consumer_lag.remove(tp.topic, str(tp.partition))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        for tp in assigned:
            self._offsets.setdefault(tp, PartitionOffsets())
        if self.on_assigned is not None and assigned:
            # The relay reads the table before it publishes from memory again: a workflow
            # whose partition came from another replica may have rows that replica left.
            self.on_assigned()

    @property
    def assignment(self) -> set[TopicPartition]:
        return set(self.consumer.assignment())
