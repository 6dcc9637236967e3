"""faust's table recovery and fetching, mended so that no record is skipped.

faust-streaming 0.15.3 ends a recovery (``Recovery.on_recovery_completed``; this app always
has tables, so faust's other ending, ``_resume_streams``, is never taken) by resuming the
stream partitions *before* awaiting the seek to their committed offsets, then resuming
flow control, which empties the queues of records fetched so far. Records fetched
between the resume and the seek land in those queues and are thrown away while the
position has moved past them; faust then commits past the gap, and the view silently
misses them (seen here: the first records after a restart's committed offset, one by one).

Two more ways records go missing at a (re)assignment, both mended here:

- aiokafka's ``seek_to_committed`` leaves a partition with no committed offset where
  its fetcher got to, and faust's ``getmany`` drops what was fetched for a partition
  still paused: such a partition is sought to its earliest offset explicitly.
- The seek happens while the partitions are paused, and the queues are emptied before
  they resume, so nothing fetched from a stale position reaches the agents.
- faust "pauses" a partition in its own books only, and hands aiokafka its *live* set of
  active partitions for each fetch. The set changes during a fetch (recovery pauses the
  changelogs it read); aiokafka reads an empty set as "every partition" and hands out
  records of the paused stream partitions, which faust drops with the position moved past
  them (seen here: the one record published while the view was down, never read).
  :class:`SnapshotConsumerThread` fetches for a copy of the set taken when the fetch
  starts, and nothing for an empty one; the seek waits for fetches begun before it.

:class:`OrderedTableManager` and :class:`OrderedTransport` plug it in (see ``build_app``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Set
from typing import Any, cast

import aiokafka
from faust.tables.manager import TableManager
from faust.tables.recovery import RebalanceAgain, Recovery, ServiceStopped
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from mode.utils.times import Seconds

log = logging.getLogger(__name__)

FETCH_DRAIN_S = 10.0
"""Longest wait for fetches begun before a seek (a fetch waits up to 1 s for records)."""


class OrderedRecovery(Recovery):
    async def _wait(self, coro: Any, timeout: Seconds | None = None) -> None:
        # mode's wait_first reports a *timeout* as "stopped": faust then raises
        # ServiceStopped and _restart_recovery leaves its loop for good, the stream
        # partitions paused and nothing logged: the view stalls until a restart.
        # A timeout restarts the recovery instead (a genuine stop still stops it).
        try:
            await super()._wait(coro, timeout=timeout)
        except ServiceStopped:
            if self.should_stop or self._crashed.is_set():
                raise
            self.log.error("recovery step timed out after %ss; recovering again", timeout)
            self.signal_recovery_start.set()
            raise RebalanceAgain() from None

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        # faust's own, up to the resume (which is reordered in _resume).
        self.log.info("Restore complete!")
        await self.app.on_rebalance_complete.send()
        self._set_recovery_ended()
        callbacks = [
            asyncio.ensure_future(
                table.on_recovery_completed(self.actives_for_table[table], self.standbys_for_table[table])
            )
            for table in self.tables.values()
        ]
        if callbacks:
            await asyncio.wait(callbacks)
        if self.app.consumer_generation_id != generation_id:
            self.log.warning("Recovery rebalancing again")
            return
        await self._resume()
        self.tables.on_actives_ready()
        if not self.app.assignor.assigned_standbys():
            self.tables.on_standbys_ready()
        self.app.on_rebalance_end()
        self.log.info("Worker ready")

    async def _resume(self) -> None:
        consumer = self.app.consumer
        streams = {tp for tp in consumer.assignment() if not self._is_changelog_tp(tp)}
        if streams:
            await _fetches_drained(consumer)
            self.log.info("Seek stream partitions to committed offsets.")
            timeout = self.app.conf.broker_request_timeout
            await self._wait(consumer.perform_seek(), timeout=timeout)
            committed = cast(Any, consumer)._committed_offset
            uncommitted: set[TP] = {tp for tp in streams if not committed.get(tp)}
            if uncommitted:
                earliest = await consumer.earliest_offsets(*uncommitted)
                await self._wait(consumer.seek_wait(dict(earliest)), timeout=timeout)
        self.completed.set()
        # Records queued before the seek are stale: dropped now, before anything resumes.
        self.app.flow_control.resume()
        consumer.resume_partitions(streams)
        consumer.resume_flow()
        await cast(Any, self.app)._fetcher.maybe_start()


class OrderedTableManager(TableManager):
    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = OrderedRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


async def _fetches_drained(consumer: Any) -> None:
    """Until no fetch begun before now (its partitions maybe the paused ones) is running."""
    thread = getattr(consumer, "_thread", None)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FETCH_DRAIN_S
    # Polled: the count changes on the consumer thread's own loop, where no asyncio.Event
    # of this loop may be set.
    while getattr(thread, "in_flight", 0) and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    if getattr(thread, "in_flight", 0):
        log.error("a fetch still runs at the seek: records it hands out may be skipped")


class SnapshotConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    in_flight = 0
    """Fetches running now (read from the app's loop; changed on the consumer thread's)."""

    async def _fetch_records(
        self,
        consumer: aiokafka.AIOKafkaConsumer,
        active_partitions: Set[TP] | None,
        timeout: float | None = None,
        max_records: int | None = None,
    ) -> Any:
        if active_partitions is None:  # a client-only app: every partition
            return await super()._fetch_records(consumer, cast(Any, active_partitions), timeout, max_records)
        snapshot = set(active_partitions)
        if not snapshot:
            return {}
        self.in_flight += 1
        try:
            return await super()._fetch_records(consumer, snapshot, timeout, max_records)
        finally:
            self.in_flight -= 1


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return SnapshotConsumerThread(self, loop=self.loop, beacon=self.beacon)


class OrderedTransport(faust_aiokafka.Transport):
    """faust's aiokafka transport with :class:`SnapshotConsumerThread`:
    ``app.transport = OrderedTransport(app.conf.broker_consumer, app)``."""

    Consumer = _Consumer
