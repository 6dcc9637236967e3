"""Wiring and lifecycle of one service process: the only place that knows every part.

start: logging, tracing, PostgreSQL pool and DDL, Kafka producer and consumer,
outbox relay, HTTP (/health, /metrics).
stop (SIGTERM): stop polling, let in-flight records finish (grace period), flush
the outbox, commit offsets, leave the group, close everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from aiokafka.errors import KafkaConnectionError, UnknownTopicOrPartitionError
from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from chorus.kernel.clock import Clock, clock_from_setting
from chorus.kernel.db import create_pool
from chorus.kernel.deadletters import refused_row_dead_letter
from chorus.kernel.edge import KafkaEdge
from chorus.kernel.errors import EventTooLargeError
from chorus.kernel.guard import DeadLetterGuard
from chorus.kernel.kafka import make_consumer, make_producer
from chorus.kernel.lanes import Dispatcher
from chorus.kernel.logs import fields, setup_logging
from chorus.kernel.loops import forever, run_main
from chorus.kernel.metrics import Metrics
from chorus.kernel.outbox import OutboxWriter, outbox_message
from chorus.kernel.pipeline import Pipeline
from chorus.kernel.records import Record
from chorus.kernel.relay import OutboxRelay
from chorus.kernel.service import RuntimeHandle, ServiceSpec
from chorus.kernel.settings import EX_CONFIG, ChorusSettings
from chorus.kernel.store import OutboxMessage, OutboxRow, ServiceStore
from chorus.kernel.stuck import StuckRecords
from chorus.kernel.tracing import setup_tracing
from chorus.outside import breaker
from chorus.privacy.crypto import HttpKeyStore, Sealer
from chorus.privacy.datarequests import REQUESTS
from chorus.privacy.signing import SigningConfigError, load_keys
from chorus.releases.report import ReleaseWindow, report_envelope
from chorus.releases.rollouts import MAIN_RELEASE, RolloutFollower, RolloutView, release_group
from chorus.web.apikeys import DEMO_SERVICE_KEY
from chorus.web.http import HttpServer, api_client
from chorus_contracts.envelope import RELEASE_PATTERN, Priority, ProducerRef
from chorus_contracts.registry import RUNTIME_PRODUCER, Registry, load_registry
from chorus_contracts.rollouts import RolloutChanged

log = logging.getLogger("chorus.runner")

CONTROL_TOPIC_EVENT = "retry.due"
LOCAL_REGION = "local"
LOCAL_KEY_SERVICE = "http://127.0.0.1:8117"
DEMO_SUBJECT_KEY = "demo-subject-key-not-for-production"


class ServiceSettings(ChorusSettings):
    """Settings every service has; a service's config.py subclasses this."""

    model_config = SettingsConfigDict(env_prefix="CHORUS_", extra="ignore", frozen=True)

    http_host: str = "127.0.0.1"
    http_port: int = 0
    group_id: str = ""
    """The service's consumer group; defaults to the service name. A named release reads in
    ``<group>.<release>``."""
    release: str = Field(default="", pattern=f"^$|{RELEASE_PATTERN[1:]}")
    """CHORUS_RELEASE: run as this release beside others of the service (versioned rollouts):
    its own consumer group, only the workflows pinned to it, this label as the producer
    version. Empty: the service's version, in the service's group, owning whatever no
    rollout pins elsewhere."""

    @field_validator("release")
    @classmethod
    def _not_main(cls, value: str) -> str:
        if value == MAIN_RELEASE:
            raise ValueError(
                f"{MAIN_RELEASE!r} names the release without CHORUS_RELEASE; choose another label"
            )
        return value

    release_report_s: float = Field(default=30.0, gt=0)
    """How often each replica reports its steps and their latency (release.reported)."""
    instance: str = ""
    concurrency: int = 32
    max_buffered_per_partition: int = 200
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 2_000
    commit_interval_s: float = 0.5
    shutdown_grace_s: float = 20.0
    max_event_bytes: int = 1_048_576
    dead_letter_guard_consecutive: int = 25
    db_pool_size: int = 10
    outbox_keep_s: float = 3600.0
    """Published outbox rows are kept this long (for inspection), then deleted."""
    archive_keep_s: float = 365 * 86400.0
    """Rows a retirement archived (``<service>.archive``) are kept this long, then deleted."""
    purge_interval_s: float = 3600.0
    """How often time-based retention runs (the archive, ServiceSpec.owned_data's purge)."""
    signing_dir: str = ""
    """Directory of Ed25519 keys (chorus.privacy.signing): every signer's ``<service>.pub``, and
    this service's ``<service>.key`` when it produces a signed (decision) event type."""
    stuck_record_alert_s: float = 180.0
    """A record failing for an infrastructure reason this long is reported stuck (/health,
    chorus status, chorus_records_stuck) while it goes on being retried."""
    key_stores: dict[str, str] = {LOCAL_REGION: LOCAL_KEY_SERVICE}
    """CHORUS_KEY_STORES: region -> URL of that region's key service. This service seals
    and opens personal data of these regions only (residency, chorus.privacy.crypto)."""
    data_region: str = LOCAL_REGION
    """Where keys of new subjects are made, unless ``data_regions`` names their workflow type."""
    data_regions: dict[str, str] = {}
    """CHORUS_DATA_REGIONS: workflow type -> region (the same map on every service)."""
    key_service_api_key: str = DEMO_SERVICE_KEY
    """What this service presents to the key services (their CHORUS_API_KEYS, role service)."""
    key_cache_s: float = 60.0
    """How long a data key stays cached. The replica that reads an erasure request forgets
    its keys at once; the service's other replicas within this time."""
    subject_key: str = DEMO_SUBJECT_KEY
    """CHORUS_SUBJECT_KEY: the secret under which subject references are keyed (HMAC), where
    they enter (a submission) and where an operator names one (erasure, access log)."""

    def demo_secrets(self) -> list[str]:
        found = super().demo_secrets()
        if self.key_service_api_key == DEMO_SERVICE_KEY:
            found.append("CHORUS_KEY_SERVICE_API_KEY (the demo's)")
        if self.subject_key == DEMO_SUBJECT_KEY:
            found.append("CHORUS_SUBJECT_KEY (the demo's)")
        return found


class ServiceRunner:
    def __init__(
        self,
        spec: ServiceSpec[Any, Any],
        settings: ServiceSettings,
        *,
        deps: Any = None,
        clock: Clock | None = None,
        registry: Registry | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.deps = deps
        self.clock = clock or clock_from_setting(settings.clock)
        self.registry = registry or load_registry(
            Path(settings.schemas_dir) if settings.schemas_dir else None
        )
        self.release = settings.release or spec.version
        self.base_group = settings.group_id or spec.name
        self.group = release_group(self.base_group, settings.release or MAIN_RELEASE)
        self.rollouts = RolloutView()
        signs = {t for t in spec.produces if self.registry.signer_of(t) == spec.name}
        self.keys = load_keys(settings.signing_dir, spec.name, signs=signs, checks=self.registry.signed_by())
        self.metrics = Metrics(spec.name)
        self.store = ServiceStore(spec.name)
        self.guard = DeadLetterGuard(max_consecutive=settings.dead_letter_guard_consecutive)
        self.pool: asyncpg.Pool | None = None
        self.relay: OutboxRelay | None = None
        self.edge: KafkaEdge | None = None
        self.outbox_backlog = 0
        """Outbox rows committed and not yet published (as of the last housekeeping round)."""
        self.dispatcher: Dispatcher | None = None
        self.pipeline: Pipeline | None = None
        self.stuck: StuckRecords | None = None
        self.http: HttpServer | None = None
        self.handle: RuntimeHandle | None = None
        self.sealer = sealer
        self._tasks: list[asyncio.Task[None]] = []
        self._stack = AsyncExitStack()
        self._stopped = asyncio.Event()
        self.fatal: BaseException | None = None
        self._fatal_event = asyncio.Event()

    # -- topology --------------------------------------------------------------------------

    def topics(self) -> list[str]:
        """Physical topics to subscribe: those of every handled event type, plus control
        and the data requests (erasure, retention) every service answers."""
        names: set[str] = set()
        for event_type in [*self.spec.consumes(), CONTROL_TOPIC_EVENT, *REQUESTS]:
            names.update(self.registry.topic_for(event_type).physical_topics())
        return sorted(names)

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

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()  # close whatever did start: pool, producer, consumer
            raise

    async def _start(self) -> None:
        s = self.settings
        setup_logging(self.spec.name, s.log_level, s.log_json)
        setup_tracing(self.spec.name, self.release)
        pool = await self._start_database()
        sealer = self.sealer = self.sealer or await self._start_sealer()
        if self.deps is None:
            self.deps = await self._stack.enter_async_context(self.spec.bootstrap(s))
        client_id = f"{self.spec.name}{'-' + s.instance if s.instance else ''}"
        relay = await self._start_relay(pool, client_id)
        follower = await self._start_rollouts(client_id)
        self.pipeline = Pipeline(
            spec=self.spec,
            deps=self.deps,
            registry=self.registry,
            store=self.store,
            pool=pool,
            clock=self.clock,
            metrics=self.metrics,
            group=self.group,
            base_group=self.base_group,
            guard=self.guard,
            max_bytes=s.max_event_bytes,
            on_outbox=relay.wake,
            on_committed=relay.publish_committed,
            keys=self.keys,
            sealer=sealer,
            release=s.release,
            rollouts=self.rollouts,
        )
        self.stuck = StuckRecords(s.stuck_record_alert_s, self.metrics, wall_clock=self.clock.now)
        self.dispatcher = Dispatcher(
            self.pipeline.handle,
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
            producer=self.pipeline.producer,
            outbox=OutboxWriter(self.store, self.registry, relay.wake, self.keys.signer, sealer),
            signer=self.keys.signer,
            sealer=sealer,
            rollouts=self.rollouts,
        )
        self.http = HttpServer(
            s.http_host,
            s.http_port,
            self.metrics,
            self.health,
            title=self.spec.name,
            api_keys=getattr(s, "api_keys", None),  # a service with an API has ApiKeySettings
        )
        if self.spec.http_routes is not None:
            self.http.include(self.spec.http_routes(self.handle))
        await self.http.start()
        self._tasks = [
            asyncio.create_task(relay.run(), name="outbox-relay"),
            asyncio.create_task(edge.run(), name="poll-loop"),
            asyncio.create_task(follower.run(), name="rollouts"),
            asyncio.create_task(self._report_release(), name="release-report"),
            asyncio.create_task(self._housekeeping(), name="housekeeping"),
            *(
                asyncio.create_task(worker(self.handle), name=f"worker:{getattr(worker, '__name__', 'w')}")
                for worker in self.spec.workers
            ),
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_ended)
        log.info(
            "service started",
            extra=fields(topics=self.topics(), group=self.group, http_port=self.http.port),
        )

    async def _start_database(self) -> asyncpg.Pool:
        """The pool, and every migration (the runtime's, then the service's) applied."""
        self.pool = pool = await create_pool(self.settings.database_url, max_size=self.settings.db_pool_size)
        self._stack.push_async_callback(pool.close)
        async with pool.acquire() as conn:
            await self.store.migrate(conn)
            for migration in self.spec.migrations:
                await migration(conn)
        return pool

    async def _start_sealer(self) -> Sealer:
        """The sealer of personal data, with a client of each configured region's key service."""
        s = self.settings
        client = api_client(timeout=httpx.Timeout(10.0, connect=3.0))
        self._stack.push_async_callback(client.aclose)
        stores = {
            region: HttpKeyStore(region, url, s.key_service_api_key, client)
            for region, url in s.key_stores.items()
        }
        return Sealer(
            self.registry, stores, region=s.data_region, regions=s.data_regions, ttl_s=s.key_cache_s
        )

    async def _start_relay(self, pool: asyncpg.Pool, client_id: str) -> OutboxRelay:
        """The outbox relay with its started producer (stopped with the runner)."""
        s = self.settings
        producer = make_producer(s.kafka_bootstrap, client_id=client_id)
        await _start_kafka(producer.start(), s.kafka_bootstrap)
        producer_ref = ProducerRef(service=self.spec.name, version=self.release)
        self.relay = relay = OutboxRelay(
            store=self.store,
            database_url=s.database_url,
            pool=pool,
            producer=producer,
            clock=self.clock,
            metrics=self.metrics,
            size_limit=self.registry.publish_limit,
            dead_letter=functools.partial(self._refused_row_dead_letter, producer_ref),
            new_producer=functools.partial(make_producer, s.kafka_bootstrap, client_id=client_id),
        )

        # The relay may replace its producer (after a refused record); stop whichever it has.
        async def stop_relay_producer() -> None:  # looked up at stop time, not now
            await relay.producer.stop()

        self._stack.push_async_callback(stop_relay_producer)
        return relay

    async def _start_rollouts(self, client_id: str) -> RolloutFollower:
        """The rollout policies, read to the end before any record is handled (a decision
        on an old policy would pin a new workflow where it no longer belongs)."""
        s = self.settings
        follower = RolloutFollower(
            self.rollouts, self.registry, self.keys.verifier, bootstrap=s.kafka_bootstrap, client_id=client_id
        )
        self._stack.push_async_callback(follower.stop)
        topic = self.registry.topic_for(RolloutChanged.event_type).topic
        await _start_kafka(follower.start(), s.kafka_bootstrap, [topic])
        return follower

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
        self._stack.push_async_callback(consumer.stop)
        await _start_kafka(edge.start(), s.kafka_bootstrap, self.topics())
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
        if self.pipeline is not None:
            await self.pipeline.close()
        await self.relay.flush()
        self.relay.stop()
        with contextlib.suppress(Exception):
            await self.edge.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.http:
            await self.http.stop()
        await self._stack.aclose()
        log.info("service stopped")

    async def run_until_signalled(self) -> int:
        """Run until SIGTERM/SIGINT (graceful) or a fatal error; returns the exit code."""
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_requested.set)
        await self.start()
        fatal_wait = asyncio.create_task(self._wait_fatal())
        stop_wait = asyncio.create_task(stop_requested.wait())
        await asyncio.wait({fatal_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        fatal_wait.cancel()
        stop_wait.cancel()
        await self.stop()
        return 3 if self.fatal else 0

    async def _refused_row_dead_letter(
        self, producer: ProducerRef, row: OutboxRow, error: BaseException
    ) -> OutboxMessage | None:
        if row.topic == self.registry.physical_topic("event.dead_lettered"):
            return None  # its own dead letter would be refused the same way; the row keeps the bytes
        record = Record(row.topic, 0, 0, row.key, row.value, tuple(row.headers))
        where = f"{self.spec.name}/{row.id}"
        now = self.clock.now()
        letter = refused_row_dead_letter(record, error, producer=producer, outbox_row=where, now=now)
        assert self.sealer is not None, "the relay starts after the sealer"
        try:
            return outbox_message(self.registry, await self.sealer.seal(letter))
        except EventTooLargeError:  # the bytes stay in the failed outbox row instead
            letter = refused_row_dead_letter(
                record, error, producer=producer, outbox_row=where, now=now, omit_value=True
            )
            return outbox_message(self.registry, await self.sealer.seal(letter))

    async def _wait_fatal(self) -> None:
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
        """Outbox backlog gauge and the sweep for drains a crash interrupted."""
        assert self.pool and self.pipeline and self.dispatcher
        pool, pipeline, dispatcher = self.pool, self.pipeline, self.dispatcher

        next_purge = self.clock.now()

        async def housekeeping_round() -> None:
            nonlocal next_purge
            now = self.clock.now()
            async with pool.acquire() as conn:
                self.outbox_backlog = await self.store.outbox_backlog(conn)
                self.metrics.outbox_backlog.set(self.outbox_backlog)
                stranded = await self.store.workflows_to_drain(
                    conn, release=pipeline.identity, main=not self.settings.release
                )
                await self.store.purge_dispatched(conn, now - timedelta(seconds=self.settings.outbox_keep_s))
                if now >= next_purge:
                    next_purge = now + timedelta(seconds=self.settings.purge_interval_s)
                    await self.purge(conn, now)
            for workflow_id in stranded:
                dispatcher.run_exclusive(workflow_id, functools.partial(pipeline.drain, workflow_id))

        await forever("housekeeping", housekeeping_round, every_s=5.0)

    async def _report_release(self) -> None:
        """Publish this replica's window of steps (chorus.releases.report) every
        ``release_report_s``: when it did anything, and always while its service has a
        rollout or it runs as a named release (so the rollout service sees it running)."""
        assert self.pipeline and self.handle and self.pool
        pipeline, outbox, pool = self.pipeline, self.handle.outbox, self.pool
        instance = self.settings.instance or socket.gethostname()

        async def report() -> None:
            now = self.clock.now()
            window, pipeline.window = pipeline.window, ReleaseWindow(now)
            watched = self.settings.release or self.rollouts.policy(self.spec.name) is not None
            if window.idle and not watched:
                return
            body = window.report(self.spec.name, pipeline.identity, self.group, instance, now)
            async with pool.acquire() as conn, outbox.transaction(conn) as tx:
                await tx.publish(report_envelope(body, pipeline.producer, now))

        await forever(
            "release-report", report, every_s=self.settings.release_report_s, sleep=self.clock.sleep
        )

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        """Time-based retention: archived rows past ``archive_keep_s`` and whatever the
        service's own tables outlive (docs/retention.md)."""
        removed = {
            f"{self.store.schema}.archive": await self.store.purge_archive(
                conn, now - timedelta(seconds=self.settings.archive_keep_s)
            )
        }
        for owned in self.spec.owned_data:
            removed.update(await owned.purge(conn, now))
        removed = {table: n for table, n in removed.items() if n}
        if removed:
            log.info("retention: removed rows past their keep time", extra=fields(rows=removed))
        return removed

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
            "version": self.release,
            "release": self.pipeline.identity if self.pipeline else None,
            "group": self.group,
            "rollouts": {p.service: p.revision for p in self.rollouts.policies()},
            "assigned_partitions": len(self.edge.assignment) if self.edge else 0,
            "in_flight": self.dispatcher.in_flight if self.dispatcher else 0,
            "consumer_lag": self._lag(),
            "outbox_backlog": self.outbox_backlog,
            "relay_leader": bool(self.relay and self.relay.is_leader),
            "breakers": {b.name: b.state.value for b in breaker.known()},
            "error": str(self.fatal) if self.fatal else None,
        }

    def _lag(self) -> int:
        """Records of the assigned partitions this group has not committed yet."""
        if self.edge is None:
            return 0
        assigned = self.edge.assignment
        return sum(depth for tp, depth in self.edge.lag.items() if tp in assigned)


async def _start_kafka(starting: Any, bootstrap: str, topics: list[str] | None = None) -> None:
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


@contextlib.asynccontextmanager
async def running(
    spec: ServiceSpec[Any, Any], settings: ServiceSettings, **kwargs: Any
) -> AsyncIterator[ServiceRunner]:
    """Run a service inside ``async with`` (tests, embedding)."""
    runner = ServiceRunner(spec, settings, **kwargs)
    await runner.start()
    try:
        yield runner
    finally:
        await runner.stop()


def main(spec: ServiceSpec[Any, Any], settings: ServiceSettings) -> None:
    """The body of every service's ``__main__``."""
    try:
        runner = ServiceRunner(spec, settings)
    except SigningConfigError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None
    code = run_main(runner.run_until_signalled())
    raise SystemExit(code)


__all__ = ["RUNTIME_PRODUCER", "ServiceRunner", "ServiceSettings", "main", "running"]
