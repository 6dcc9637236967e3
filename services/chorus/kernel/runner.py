"""One service's kernel as it runs: the pool, the outbox relay, the record path, the lanes
and the Kafka edge, started in that order and stopped in reverse.

start: PostgreSQL pool and DDL, the handlers' dependencies, the relay's producer, what the
feature packages plug in (``Feature.plug``: steps, control messages, observers, workers),
the chain, the consumer, background loops.
stop (SIGTERM): stop polling, let in-flight records finish (grace period), flush the
outbox, commit offsets, leave the group, close everything.

The kernel imports no feature package: ``chorus.runtime.runner`` chooses the features a
service runs with, and is the only place that knows them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

import asyncpg
from aiokafka.errors import KafkaConnectionError, UnknownTopicOrPartitionError

from chorus.base.clock import Clock
from chorus.base.db import create_pool
from chorus.base.errors import EventTooLargeError
from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.base.metrics import Metrics
from chorus.base.settings import KernelSettings
from chorus.contracts.envelope import Priority
from chorus.contracts.registry import Registry
from chorus.kernel.answering import Answering
from chorus.kernel.chain import Chain
from chorus.kernel.deadletters import refused_row_dead_letter
from chorus.kernel.edge import KafkaEdge
from chorus.kernel.guard import DeadLetterGuard
from chorus.kernel.kafka import make_consumer, make_producer, stop_client
from chorus.kernel.lanes import Dispatcher
from chorus.kernel.outbox import OutboxWriter, outbox_message
from chorus.kernel.ports import Sealing, Signer
from chorus.kernel.recordpath import (
    KERNEL_CONTROLS,
    Identity,
    Plugs,
    Wiring,
    assembled,
    letters_for,
    run_counted,
)
from chorus.kernel.records import Record
from chorus.kernel.relay import OutboxRelay
from chorus.kernel.service import RuntimeHandle, ServiceSpec
from chorus.kernel.steps.letters import Letters
from chorus.kernel.store.postgres import PgStore, ServiceStore
from chorus.kernel.stuck import StuckRecords

log = logging.getLogger("chorus.runner")


@dataclass(frozen=True)
class Parts:
    """What a feature package gets from the kernel to build what it plugs in."""

    spec: ServiceSpec[Any, Any]
    settings: Any
    registry: Registry
    clock: Clock
    metrics: Metrics
    identity: Identity
    pool: asyncpg.Pool
    sql: ServiceStore
    store: PgStore
    outbox: OutboxWriter
    letters: Letters
    stack: AsyncExitStack
    """Whatever a feature starts is stopped with the process: push its stop here."""
    client_id: str
    """This process's Kafka client id: the service's name, with its instance's if it has one."""
    deps: Any = None
    """The handlers' dependencies (what a feature calling the service's own hooks passes)."""

    def answering(self) -> Answering:
        """How a feature answers a request addressed to the service, once (in its group's inbox)."""
        return Answering(
            self.sql, self.pool, self.outbox, self.clock, self.identity.producer, self.identity.group
        )


class Feature(Protocol):
    async def plug(self, parts: Parts) -> Plugs: ...


@dataclass(frozen=True)
class Ports:
    """What the kernel is given by the feature packages before anything starts."""

    signer: Signer | None = None
    sealer: Sealing | None = None
    features: Sequence[Feature] = ()
    handle_extras: Mapping[str, Any] = field(default_factory=dict)
    """More of the RuntimeHandle (``rollouts``: the gateway pins new workflows)."""


class KernelRunner:
    def __init__(
        self,
        spec: ServiceSpec[Any, Any],
        settings: KernelSettings,
        *,
        registry: Registry,
        clock: Clock,
        identity: Identity,
        deps: Any = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.deps = deps
        self.clock = clock
        self.registry = registry
        self.identity = identity
        self.group = identity.group
        self.metrics = Metrics(spec.name, spec.version)
        self.store = ServiceStore(spec.name)
        self.guard = DeadLetterGuard(max_consecutive=settings.dead_letter_guard_consecutive)
        self.pool: asyncpg.Pool | None = None
        self.relay: OutboxRelay | None = None
        self.edge: KafkaEdge | None = None
        self.chain: Chain | None = None
        self.outbox_backlog = 0
        """Outbox rows committed and not yet published (as of the last housekeeping round)."""
        self.dispatcher: Dispatcher | None = None
        self.stuck: StuckRecords | None = None
        self.handle: RuntimeHandle | None = None
        self.plugs = Plugs()
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stack = AsyncExitStack()
        self._stopped = asyncio.Event()
        self.fatal: BaseException | None = None
        self._fatal_event = asyncio.Event()

    # -- topology --------------------------------------------------------------------------

    def topics(self) -> list[str]:
        """Physical topics to subscribe: those of every handled event type and of every
        control message the runtime answers."""
        names: set[str] = set()
        for event_type in [*self.spec.consumes(), *self._controls()]:
            names.update(self.registry.topic_for(event_type).physical_topics())
        return sorted(names)

    def _controls(self) -> list[str]:
        return [m.event_type for m in (*KERNEL_CONTROLS, *self.plugs.controls)]

    def priority_of(self, physical_topic: str) -> str:
        spec = self.registry.topic_of_physical(physical_topic)
        if spec is None or not spec.lanes:
            return "normal"
        lanes: tuple[Priority, ...] = ("high", "low")
        for lane in lanes:
            if physical_topic == spec.physical_topic(lane):
                return lane
        return "normal"

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, ports: Ports | None = None) -> None:
        try:
            await self._start(ports or Ports())
        except BaseException:
            await self._stack.aclose()  # close whatever did start: pool, producer, consumer
            raise

    async def _start(self, ports: Ports) -> None:
        s = self.settings
        pool = await self._start_database()
        if self.deps is None:
            self.deps = await self._stack.enter_async_context(self.spec.bootstrap(s))
        client_id = f"{self.spec.name}{'-' + s.instance if s.instance else ''}"
        relay = await self._start_relay(pool, client_id, ports)
        store = PgStore(self.store, pool)
        wiring = Wiring(
            self.spec, self.registry, store, self.clock, self.metrics, self.identity, self.deps,
            self.guard, ports.sealer, s.max_event_bytes,
        )  # fmt: skip
        parts = self._parts(wiring, store, relay, ports, client_id)
        for feature in ports.features:
            self.plugs = self.plugs + await feature.plug(parts)
        self.chain = self._record_path(wiring, parts)
        self.stuck = StuckRecords(s.stuck_record_alert_s, self.metrics, wall_clock=self.clock.now)
        self.dispatcher = Dispatcher(
            run_counted(self.chain, self.metrics),
            concurrency=s.concurrency,
            on_fatal=self._on_fatal,
            stuck=self.stuck,
            per_workflow_order=self.spec.per_workflow_order,
        )
        edge = await self._start_consumer(self.dispatcher, client_id)
        self.handle = RuntimeHandle(
            service=self.spec.name,
            pool=pool,
            clock=self.clock,
            metrics=self.metrics,
            store=self.store,
            registry=self.registry,
            settings=s,
            deps=self.deps,
            producer=self.identity.producer,
            outbox=parts.outbox,
            signer=ports.signer,
            sealer=ports.sealer,
            **ports.handle_extras,
        )
        await self._serve(self.handle)
        loops: dict[str, Awaitable[None]] = {
            "outbox-relay": relay.run(),
            "poll-loop": edge.run(),
            "housekeeping": self._housekeeping(),
            **{name: run() for name, run in self.plugs.workers.items()},
            **{f"worker:{getattr(w, '__name__', 'w')}": w(self.handle) for w in self.spec.workers},
        }
        self._tasks = [asyncio.create_task(self._aw(aw), name=name) for name, aw in loops.items()]
        for task in self._tasks:
            task.add_done_callback(self._task_ended)
        log.info("service started", extra=fields(topics=self.topics(), group=self.group))

    @staticmethod
    async def _aw(awaitable: Awaitable[None]) -> None:
        await awaitable

    async def _serve(self, handle: RuntimeHandle) -> None:
        """Serve the process's HTTP endpoints (none in the kernel alone)."""

    def _parts(
        self, wiring: Wiring, store: PgStore, relay: OutboxRelay, ports: Ports, client_id: str
    ) -> Parts:
        letters = letters_for(wiring, ports.signer, relay.wake)
        outbox = OutboxWriter(self.store, self.registry, relay.wake, ports.signer, ports.sealer)
        return Parts(
            self.spec, self.settings, self.registry, self.clock, self.metrics, self.identity,
            store.pool, self.store, store, outbox, letters, self._stack, client_id, self.deps,
        )  # fmt: skip

    def _record_path(self, wiring: Wiring, parts: Parts) -> Chain:
        assert self.relay is not None
        steps, chain = assembled(wiring, parts.letters, self.plugs, on_committed=self.relay.publish_committed)
        self._closers = [steps.load.close, steps.commit.close]
        return chain

    async def _start_database(self) -> asyncpg.Pool:
        """The pool, and every migration (the runtime's, then the service's) applied."""
        s = self.settings
        self.pool = pool = await create_pool(
            s.database_url, max_size=s.db_pool_size, pool_mode=s.database_pool_mode
        )
        self._stack.push_async_callback(pool.close)
        async with pool.acquire() as conn:
            await self.store.migrate(conn)
            for migration in self.spec.migrations:
                await migration(conn)
        return pool

    async def _start_relay(self, pool: asyncpg.Pool, client_id: str, ports: Ports) -> OutboxRelay:
        """The outbox relay with its started producer (stopped with the runner)."""
        s = self.settings
        producer = make_producer(s.kafka_bootstrap, client_id=client_id)
        await start_kafka(producer.start(), s.kafka_bootstrap)
        self.relay = relay = OutboxRelay(
            store=self.store,
            database_url=s.database_direct_url or s.database_url,  # its leader lock is a session's
            pool=pool,
            producer=producer,
            clock=self.clock,
            metrics=self.metrics,
            size_limit=self.registry.publish_limit,
            dead_letter=functools.partial(self._refused_row_dead_letter, ports.sealer, ports.signer),
            new_producer=functools.partial(make_producer, s.kafka_bootstrap, client_id=client_id),
        )

        # The relay may replace its producer (after a refused record); stop whichever it has.
        async def stop_relay_producer() -> None:  # looked up at stop time, not now
            await stop_client(relay.producer)

        self._stack.push_async_callback(stop_relay_producer)
        return relay

    async def _start_consumer(self, dispatcher: Dispatcher, client_id: str) -> KafkaEdge:
        """The consumer in the service's group, subscribed and started."""
        s = self.settings
        consumer = make_consumer(
            s.kafka_bootstrap,
            group_id=self.group,
            client_id=client_id,
            max_poll_interval_ms=s.max_poll_interval_ms,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            max_partition_fetch_bytes=max(1_048_576, s.max_event_bytes * 2),
            group_instance_id=client_id if s.static_membership else None,
        )
        self.edge = edge = KafkaEdge(
            consumer,
            self.topics(),
            dispatcher,
            self.metrics,
            self.priority_of,
            max_buffered_per_partition=s.max_buffered_per_partition,
            commit_interval_s=s.commit_interval_s,
            on_assigned=self.relay.wake if self.relay else None,
        )
        self._stack.push_async_callback(stop_client, consumer)
        await start_kafka(edge.start(), s.kafka_bootstrap, self.topics())
        return edge

    async def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        assert self.edge and self.dispatcher and self.relay
        self.edge.stop_polling()
        finished = await self.dispatcher.wait_idle(self.settings.shutdown_grace_s)
        if not finished:
            log.warning("in-flight records did not finish within the grace period; they will be redelivered")
        await self.dispatcher.close()
        for close in self._closers:
            await close()
        await self.relay.flush()
        self.relay.stop()
        with contextlib.suppress(Exception):
            await self.edge.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._unserve()
        await self._stack.aclose()
        log.info("service stopped")

    async def _unserve(self) -> None:
        """Stop serving HTTP (nothing in the kernel alone)."""

    async def _refused_row_dead_letter(
        self, sealer: Sealing | None, signer: Signer | None, row: Any, error: BaseException
    ) -> Any:
        if row.topic == self.registry.physical_topic("event.dead_lettered"):
            return None  # its own dead letter would be refused the same way; the row keeps the bytes
        record = Record(row.topic, 0, 0, row.key, row.value, tuple(row.headers))
        where = f"{self.spec.name}/{row.id}"
        now = self.clock.now()
        producer = self.identity.producer
        for omit_value in (False, True):  # too large with the bytes: they stay in the failed row
            letter = refused_row_dead_letter(
                record, error, producer=producer, outbox_row=where, now=now, omit_value=omit_value
            )
            sealed = await sealer.seal(letter) if sealer is not None else letter
            try:
                return outbox_message(self.registry, sealed, signer)
            except EventTooLargeError:
                if omit_value:
                    raise
        return None

    async def wait_fatal(self) -> None:
        await self._fatal_event.wait()

    def _on_fatal(self, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = exc
            self._fatal_event.set()
            log.critical("stopping the consumer: %s", exc)
            if self.edge:
                self.edge.stop_polling()

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stopped.is_set():
            return
        exc = task.exception()
        if exc is not None:
            log.critical("%s crashed: %r", task.get_name(), exc, exc_info=exc)
            self._on_fatal(exc)

    async def _housekeeping(self) -> None:
        """Outbox backlog gauge, published rows past their keep time, and the sweep for
        drains a crash interrupted (run in the workflow's lane)."""
        assert self.pool and self.chain and self.dispatcher
        pool, chain, dispatcher = self.pool, self.chain, self.dispatcher

        async def housekeeping_round() -> None:
            now = self.clock.now()
            async with pool.acquire() as conn:
                self.outbox_backlog = await self.store.outbox_backlog(conn)
                self.metrics.outbox_backlog.set(self.outbox_backlog)
                stranded = await self.store.workflows_to_drain(
                    conn, release=self.identity.release, main=self._main_release()
                )
                await self.store.purge_dispatched(conn, now - timedelta(seconds=self.settings.outbox_keep_s))
            for workflow_id in stranded:
                dispatcher.run_exclusive(workflow_id, functools.partial(chain.drain, workflow_id))

        await forever("housekeeping", housekeeping_round, every_s=5.0)

    def _main_release(self) -> bool:
        """Whether this process also owns workflows no release claims (see chorus.releases)."""
        return True

    async def health(self) -> dict[str, Any]:
        """``failing`` (HTTP 503): stopped or the consumer gave up. ``degraded`` (200):
        running, but records are stuck behind an infrastructure failure."""
        stuck = [s.as_json() for s in self.stuck.snapshot()] if self.stuck else []
        status = "ok"
        if self.fatal is not None or self._stopped.is_set():
            status = "failing"
        elif stuck:
            status = "degraded"
        return {
            "status": status,
            "stuck_records": stuck,
            "service": self.spec.name,
            "version": self.identity.producer.version,
            "group": self.group,
            "assigned_partitions": len(self.edge.assignment) if self.edge else 0,
            "in_flight": self.dispatcher.in_flight if self.dispatcher else 0,
            "consumer_lag": self._lag(),
            "outbox_backlog": self.outbox_backlog,
            "relay_leader": bool(self.relay and self.relay.is_leader),
            **{k: v for fragment in self.plugs.health for k, v in fragment().items()},
            "error": str(self.fatal) if self.fatal else None,
        }

    def _lag(self) -> int:
        """Records of the assigned partitions this group has not committed yet."""
        if self.edge is None:
            return 0
        assigned = self.edge.assignment
        return sum(depth for tp, depth in self.edge.lag.items() if tp in assigned)


async def start_kafka(starting: Awaitable[Any], bootstrap: str, topics: list[str] | None = None) -> None:
    try:
        await starting
    except KafkaConnectionError as exc:
        raise ConnectionError(
            f"cannot reach Kafka at {bootstrap}: {exc}. Is it running? Try `make up`."
        ) from exc
    except UnknownTopicOrPartitionError as exc:
        raise ConnectionError(
            f"a topic this service reads does not exist on {bootstrap} ({', '.join(topics or [])}): "
            "create them with `chorus topics apply` (make up does)"
        ) from exc
