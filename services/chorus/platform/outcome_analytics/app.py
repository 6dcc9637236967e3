"""The faust-streaming topology: intake, facts, tables, the HTTP sidecar, the worker.

faust is used here, and only here, because this view is derived and rebuildable
(see KAFKA-LOCAL.md on faust-streaming 0.15.3). Two agents in one committed consumer
group (``group_id``), so replicas split the partitions and a restart resumes:

1. ``intake`` reads the registry's topics (their partitions are theirs: four topics,
   counts that a deployment overlay may change), checks each record as every consumer
   does and sends its :class:`~chorus.platform.outcome_analytics.domain.Fact` to the
   app's own topic ``<group_id>-facts``, keyed by workflow.
2. ``view`` reads the facts and folds them into two faust tables (see
   :mod:`chorus.platform.outcome_analytics.adapters.tables`): per-workflow state and
   hourly tumbling windows, each backed by a compacted changelog topic partitioned as
   the facts are. A restart restores the tables from their changelogs and reads on from
   the committed offsets; each replica owns the partitions it is assigned.

What each setting below guards against:

- ``concurrency=1`` on both agents: with more, faust can commit offsets past records
  still in flight (#606); and the view's fold reads then writes a workflow's state,
  which two actors of one partition would race on.
- Raw key and value serializers on the inputs: faust's own deserialization runs before
  the agent and drops a record that fails it with only a log line (never reaching code
  that could dead-letter it). The records are decoded by
  :func:`chorus.kernel.codec.decode` in :func:`~chorus.platform.outcome_analytics.handlers.on_record`,
  which catches everything (an exception inside an agent skips its offset, #527, and
  stops the agent).
- ``topic_allow_declare`` with only internal topics: faust declares the facts topic and
  the changelogs (its principal may create topics named ``<group_id>-*`` and nothing
  else); the registry's topics are not internal and are never declared.
- ``TableManager=OrderedTableManager`` and ``OrderedTransport``: faust's end of recovery
  and its fetching lose records at a rebalance or restart
  (:mod:`chorus.platform.outcome_analytics.adapters.recovery`).
- ``topic_disable_leader``, ``web_enabled=False``, a temporary ``datadir``: no
  leader-election topic, no second web server, no data directory in the cwd (the
  tables are in memory, their changelogs are the durable copy).
- No ``@app.timer``: faust timers are in-memory only (nothing here needs one).
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import faust
import mode
from faust.exceptions import ConsumerNotStarted
from faust.types import TP, Message

from chorus.base.errors import ConfigError
from chorus.base.logs import fields
from chorus.base.settings import EX_CONFIG
from chorus.contracts.registry import Registry, load_registry
from chorus.kernel.kafka import KafkaAuth, kafka_auth
from chorus.kernel.records import Record
from chorus.observability.logs import setup_logging
from chorus.platform.outcome_analytics.adapters.deadletters import KafkaDeadLetters
from chorus.platform.outcome_analytics.adapters.facts import KafkaFacts
from chorus.platform.outcome_analytics.adapters.http import routes
from chorus.platform.outcome_analytics.adapters.metrics import ViewCollector
from chorus.platform.outcome_analytics.adapters.producer import DurableProducer
from chorus.platform.outcome_analytics.adapters.recovery import OrderedTableManager, OrderedTransport
from chorus.platform.outcome_analytics.adapters.tables import TableStore
from chorus.platform.outcome_analytics.bootstrap import bootstrap, facts_topic
from chorus.platform.outcome_analytics.config import SERVICE, Settings
from chorus.platform.outcome_analytics.domain import ACCEPT, Fact, OutcomeView
from chorus.platform.outcome_analytics.handlers import on_record
from chorus.web.http import HttpServer

log = logging.getLogger(__name__)

FACTS_RETENTION = timedelta(days=7)


def input_topics(registry: Registry) -> list[str]:
    """Every physical topic (lanes included) carrying an event type the view counts."""
    names = {
        physical for event_type in ACCEPT for physical in registry.topic_for(event_type).physical_topics()
    }
    return sorted(names)


def to_record(message: Message) -> Record:
    """A faust ``Message`` as the runtime's client-independent :class:`Record`."""
    headers: Iterable[tuple[str, bytes | None]]
    raw_headers = message.headers or ()
    headers = raw_headers.items() if isinstance(raw_headers, Mapping) else raw_headers
    timestamp = message.timestamp
    return Record(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        headers=tuple((str(k), v or b"") for k, v in headers),
        # faust reports the Kafka timestamp in (float) seconds.
        timestamp_ms=round(timestamp * 1000) if timestamp is not None else None,
    )


def faust_credentials(auth: KafkaAuth) -> faust.types.auth.CredentialsT | None:
    """The runtime's Kafka login (CHORUS_KAFKA_*) in faust's terms: the same principal."""
    if auth.uses_sasl:
        return faust.SASLCredentials(
            username=auth.sasl_username,
            password=auth.sasl_password.get_secret_value(),
            ssl_context=auth.ssl_context,
            mechanism=auth.sasl_mechanism,
        )
    if auth.uses_tls:
        return faust.SSLCredentials(auth.ssl_context)
    return None


@dataclass
class Topology:
    """The faust app and what the process reads back from it."""

    app: faust.App
    view: OutcomeView
    facts: str
    """The facts topic's name."""


def build_app(
    settings: Settings,
    topics: list[str],
    *,
    datadir: Path,
    handle: Callable[[Record], Awaitable[None]],
) -> Topology:
    """The faust app: ``intake`` over ``topics`` calling ``handle`` per record, ``view``
    folding the facts into the tables. Nothing connects until the worker starts it."""
    app = faust.App(
        settings.group_id,
        broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")],
        broker_credentials=faust_credentials(kafka_auth()),
        store="memory://",
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        topic_disable_leader=True,
        topic_allow_declare=True,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        table_standby_replicas=settings.standby_replicas,
        TableManager=OrderedTableManager,
        # A topic missing from the consumer's metadata when the group forms (the facts
        # topic and changelogs are created moments before; a loaded broker may not list
        # them yet) is left unassigned until the next refresh: 5 min by default.
        consumer_metadata_max_age_ms=10_000,
        web_enabled=False,
        autodiscover=False,
        datadir=str(datadir),
    )
    app.transport = OrderedTransport(app.conf.broker_consumer, app)
    inputs = app.topic(
        *topics,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        # A tombstone reaches the agent (and is dead-lettered), not skipped unseen.
        allow_empty=True,
    )
    facts = app.topic(
        facts_topic(settings),
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.partitions,
        # Facts are read within moments; a week covers any outage of the view.
        retention=FACTS_RETENTION,
        internal=True,
    )
    view = OutcomeView(TableStore.declare(app, partitions=settings.partitions))

    async def intake(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            # handle() never raises; when it returns the fact or the dead letter is
            # durable, and only then (on the next iteration) does faust ack the offset.
            await handle(to_record(event.message))

    async def fold(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            try:
                view.apply_fact(Fact.model_validate_json(event.message.value))
            except Exception:
                # Facts are this app's own, written by the intake from verified records:
                # one that fails is a bug, logged as an error, not a reason to stop.
                log.exception(
                    "fact not applied",
                    extra=fields(partition=event.message.partition, offset=event.message.offset),
                )

    app.agent(inputs, name=f"{SERVICE}.intake", concurrency=1)(intake)
    app.agent(facts, name=f"{SERVICE}.view", concurrency=1)(fold)
    return Topology(app, view, facts.get_topic_name())


class Sidecar(mode.Service):
    """Starts the intake's producer and the HTTP server with the worker, stops them after."""

    def __init__(self, producer: DurableProducer, http: HttpServer) -> None:
        super().__init__()
        self.producer = producer
        self.http = http

    async def on_start(self) -> None:
        await self.producer.start()
        await self.http.start()
        log.info("outcome analytics listening", extra=fields(port=self.http.port))

    async def on_stop(self) -> None:
        await self.http.stop()
        await self.producer.stop()


class Readiness:
    """Where the worker is: starting, serving, or rebalancing after it served once."""

    def __init__(self, app: faust.App) -> None:
        self.app = app
        self.was_ready = False

    def assigned(self) -> set[TP]:
        try:
            return set(self.app.consumer.assignment()) if self.app.started else set()
        except ConsumerNotStarted:  # the worker is up, its consumer thread not yet
            return set()

    def status(self) -> str:
        recovered = self.app.started and cast(Any, self.app.tables).recovery.completed.is_set()
        if recovered and not self.app.rebalancing and self.assigned():
            self.was_ready = True
            return "ok"
        # A rebalance pauses reading for a moment; the view it has is still served.
        return "degraded" if self.was_ready else "starting"


def run(settings: Settings) -> None:
    """Run one replica until SIGTERM/SIGINT. Raises SystemExit with the worker's code."""
    setup_logging(SERVICE, settings.log_level, settings.log_json)
    registry = load_registry(Path(settings.schemas_dir) if settings.schemas_dir else None)
    topics = input_topics(registry)
    undeclared = sorted(
        {spec.topic for spec in map(registry.topic_for, ACCEPT) if SERVICE not in spec.consumers}
    )
    if undeclared:
        # The registry's edges drive docs and contract tests; say when they are wrong.
        log.warning(
            "reading topics whose yaml does not list this service as a consumer",
            extra=fields(topics=undeclared),
        )
    try:
        deps, producer = bootstrap(settings, registry)
    except ConfigError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None

    async def handle(record: Record) -> None:
        await on_record(record, deps)

    with tempfile.TemporaryDirectory(prefix=f"{SERVICE}-") as datadir:
        topology = build_app(settings, topics, datadir=Path(datadir), handle=handle)
        app, view = topology.app, topology.view
        deps.metrics.registry.register(ViewCollector(view))
        readiness = Readiness(app)

        async def health() -> dict[str, Any]:
            assigned = readiness.assigned()
            owned = sorted(tp.partition for tp in assigned if tp.topic == topology.facts)
            return {
                "status": readiness.status(),
                "group": settings.group_id,
                "topics": topics,
                "facts_topic": topology.facts,
                "read": deps.handled,
                "assigned_partitions": len([tp for tp in assigned if tp.topic in topics]),
                "view_partitions": owned,
                "applied": view.applied,
                "facts_sent": deps.facts.sent if isinstance(deps.facts, KafkaFacts) else None,
                "dead_letters_published": (
                    deps.dead_letters.published if isinstance(deps.dead_letters, KafkaDeadLetters) else None
                ),
                "positions": {f"{t}:{p}": offset for (t, p), offset in sorted(deps.positions.items())},
            }

        http = HttpServer(
            settings.http_host,
            settings.http_port,
            deps.metrics,
            health,
            title=SERVICE,
            api_keys=settings.api_keys,
        )
        http.include(routes(view))
        log.info("outcome analytics starting", extra=fields(group=settings.group_id, topics=topics))
        worker = faust.Worker(
            app,
            Sidecar(producer, http),
            loglevel=settings.log_level,
            quiet=True,
            # chorus.base.logs owns logging (JSON lines with trace fields); mode would replace it.
            override_logging=False,
            redirect_stdouts=False,
        )
        worker.spinner = None  # a terminal progress spinner has no place in a service's output
        worker.execute_from_commandline()
