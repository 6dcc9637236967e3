"""The faust-streaming plumbing: topics in, one agent, the HTTP sidecar, the worker.

faust is used here, and only here, because this view is derived and rebuildable
(see KAFKA-LOCAL.md on faust-streaming 0.15.3). What each setting below guards
against:

- ``concurrency=1``: with more, faust can commit offsets past records still in
  flight (#606). One actor handles every partition, one record at a time.
- Raw key and value serializers: faust's own deserialization runs before the
  agent and drops a record that fails it with only a log line (never reaching
  code that could dead-letter it). Bytes always "deserialize"; the records are
  then decoded by :func:`chorus.kernel.codec.decode` (the registry's pydantic models)
  inside :func:`chorus.platform.outcome_analytics.handlers.on_record`, which catches everything
  (an exception inside an agent skips its offset, #527, and stops the agent).
- ``store="memory://"`` and no faust Table: the view is an
  :class:`~chorus.platform.outcome_analytics.domain.OutcomeView` in memory. A faust Table would
  add a changelog topic that is restored on start *and* then the inputs are read
  again from the beginning, counting everything twice; and its keys (type, hour)
  are not the inputs' keys (workflow id), which faust tables require.
- A fresh consumer group per start, reading from the earliest offset: the view
  is lost with the process, so each start rebuilds it from the first record;
  with a unique group there are no committed offsets to fight, and each replica
  gets every partition (a shared group would split the view between replicas).
  The cost: one abandoned group per start, expired by the broker
  (``offsets.retention.minutes``).
- ``topic_disable_leader``, ``topic_allow_declare=False``, ``web_enabled=False``,
  a temporary ``datadir``: faust would otherwise create a leader-election topic
  per app id (one per start here), create input topics the registry owns, serve
  a second web server, and leave a data directory per app id in the cwd.
- No ``@app.timer``: faust timers are in-memory only (nothing here needs one).
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import faust
import mode
from faust.exceptions import ConsumerNotStarted
from faust.types import Message

from chorus.base.errors import ConfigError
from chorus.base.logs import fields
from chorus.base.settings import EX_CONFIG
from chorus.contracts.registry import Registry, load_registry
from chorus.kernel.kafka import KafkaAuth, kafka_auth
from chorus.kernel.records import Record
from chorus.observability.logs import setup_logging
from chorus.platform.outcome_analytics.adapters.deadletters import KafkaDeadLetters
from chorus.platform.outcome_analytics.adapters.http import routes
from chorus.platform.outcome_analytics.bootstrap import bootstrap
from chorus.platform.outcome_analytics.config import SERVICE, Settings
from chorus.platform.outcome_analytics.domain import ACCEPT
from chorus.platform.outcome_analytics.handlers import on_record
from chorus.web.http import HttpServer

log = logging.getLogger(__name__)


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


def build_app(
    settings: Settings,
    topics: list[str],
    *,
    group_id: str,
    datadir: Path,
    handle: Callable[[Record], Awaitable[None]],
) -> faust.App:
    """The faust app: one agent over ``topics`` calling ``handle`` per record, in order.

    Nothing connects until the worker starts it.
    """
    app = faust.App(
        group_id,
        broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")],
        broker_credentials=faust_credentials(kafka_auth()),
        store="memory://",
        key_serializer="raw",
        value_serializer="raw",
        consumer_auto_offset_reset="earliest",
        topic_disable_leader=True,
        topic_allow_declare=False,
        web_enabled=False,
        autodiscover=False,
        datadir=str(datadir),
    )
    channel = app.topic(
        *topics,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        # A tombstone reaches the agent (and is dead-lettered), not skipped unseen.
        allow_empty=True,
    )

    async def outcome_analytics(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            # handle() never raises; when it returns the record is applied or its
            # dead letter is durable, and only then (on the next iteration) does
            # faust ack the offset.
            await handle(to_record(event.message))

    app.agent(channel, name=f"{SERVICE}.view", concurrency=1)(outcome_analytics)
    return app


class Sidecar(mode.Service):
    """Starts the dead-letter producer and the HTTP server with the worker, stops them after."""

    def __init__(self, dead_letters: KafkaDeadLetters, http: HttpServer) -> None:
        super().__init__()
        self.dead_letters = dead_letters
        self.http = http

    async def on_start(self) -> None:
        await self.dead_letters.start()
        await self.http.start()
        log.info("outcome analytics listening", extra=fields(port=self.http.port))

    async def on_stop(self) -> None:
        await self.http.stop()
        await self.dead_letters.stop()


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
        deps, dead_letters = bootstrap(settings, registry)
    except ConfigError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None
    group_id, view, metrics = deps.consumer_group, deps.view, deps.metrics

    async def handle(record: Record) -> None:
        await on_record(record, deps)

    with tempfile.TemporaryDirectory(prefix=f"{SERVICE}-") as datadir:
        app = build_app(settings, topics, group_id=group_id, datadir=Path(datadir), handle=handle)

        async def health() -> dict[str, Any]:
            try:
                assigned = app.consumer.assignment() if app.started else set()
            except ConsumerNotStarted:  # the worker is up, its consumer thread not yet
                assigned = set()
            return {
                # "ok" once the group is joined and partitions are being read; how far
                # the view has got is in "positions".
                "status": "ok" if assigned else "starting",
                "group": group_id,
                "topics": topics,
                "assigned_partitions": len(assigned),
                "applied": view.applied,
                "dead_letters_published": dead_letters.published,
                "positions": {f"{t}:{p}": offset for (t, p), offset in sorted(deps.positions.items())},
            }

        http = HttpServer(
            settings.http_host, settings.http_port, metrics, health, title=SERVICE, api_keys=settings.api_keys
        )
        http.include(routes(view))
        log.info("outcome analytics starting", extra=fields(group=group_id, topics=topics))
        worker = faust.Worker(
            app,
            Sidecar(dead_letters, http),
            loglevel=settings.log_level,
            quiet=True,
            # chorus.base.logs owns logging (JSON lines with trace fields); mode would replace it.
            override_logging=False,
            redirect_stdouts=False,
        )
        worker.spinner = None  # a terminal progress spinner has no place in a service's output
        worker.execute_from_commandline()
