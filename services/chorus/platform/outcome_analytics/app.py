"""The faust-streaming plumbing: three agents, two tables, the HTTP sidecar, the worker.

faust is used here, and only here, because this view is derived and rebuildable
(see KAFKA-LOCAL.md on faust-streaming 0.15.3). The view is kept the way faust means
it to be kept: in tables backed by changelog topics, in one consumer group whose
offsets are committed, so a restart restores the tables and reads on from where the
group stopped, and replicas split the partitions (and the view) between them.

The record path, one agent per partitioning of the state (domain.py's three steps)::

    inputs (keyed by workflow id, 6/6/3/3 partitions: not co-partitioned)
      --read: decode, check signature, dead-letter, observe()-->  <id>-by_workflow
    <id>-by_workflow (key: the workflow a fact belongs to)
      --workflows: fold() into table "workflows" (key: workflow id)-->  <id>-by_type
    <id>-by_type (key: workflow type)
      --hours: Bucket.apply() into table "hours", tumbling 1 h windows on the event's
        own time (relative_to_field(HourChange.at)), key: workflow type

Why each choice:

- A repartition before any state: a faust table's changelog record goes to the
  partition of the event being handled, so a table's key must be the key of the topic
  its agent reads. The inputs are keyed by workflow id but not co-partitioned (3 and 6
  partitions), and a dead letter's workflow is in its payload, not its key; so the
  reader re-keys every fact onto one internal topic with the internal partition count.
- ``concurrency=1`` on every agent: with more, faust can commit offsets past records
  still in flight (#606, fix unreleased), and two actors on one partition would
  read-modify-write the same table key concurrently, losing one of the writes.
- Every exception caught inside the agents: an exception skips the record's offset
  (#527) and stops the agent. The reader dead-letters (with the original bytes); the
  two internal agents read only what the reader wrote, so a failure there is a bug:
  logged and counted, the fact stays on the input topics for a rebuild.
- Raw key and value serializers on the inputs: faust's own deserialization runs before
  the agent and drops a record that fails it with only a log line. Bytes always
  "deserialize"; records are decoded by :func:`chorus.kernel.codec.decode` inside
  :func:`chorus.platform.outcome_analytics.handlers.on_record`.
- Idempotent counting across restarts: faust is at-least-once (it flushes the producer,
  changelogs included, before committing offsets). Every fact is deduplicated in
  :func:`~chorus.platform.outcome_analytics.domain.fold` where all of a workflow's facts
  meet, so a record read twice changes nothing there; the hourly buckets keep the
  offset of the last change they took (``through``) and skip a change read again
  after a crash. What stays at-least-once: a hard crash between the flush of a
  workflow's state and of its changes (two topics, no transaction) can lose or repeat
  those changes; a clean stop and a rebalance commit after flushing, so they cannot.
  ``processing_guarantee="exactly_once"`` would close that window, but faust's has open
  duplicate and crash reports; a rebuild (README) is the remedy instead.
- ``store="memory://"``: rocksdict is not installed; each start restores the tables
  from their compacted changelogs (measured in the tests), not from the inputs.
- ``table_standby_replicas`` from the settings (default 0): a standby is a full second
  copy of a partition's tables in another replica's memory, bought for a faster
  fail-over; the replicas split the view only without one.
- ``topic_allow_declare=False``, internal topics created by this process before the
  worker starts (adapters/topics.py): faust would otherwise try to create the inputs,
  which the registry owns, and pick its own partition counts for its topics.
  ``topic_disable_leader`` (no leader-election topic), ``web_enabled=False`` (our HTTP
  server serves the view), ``canonical_url``: the URL the other replicas reach this
  one at, spread through the group's assignment (adapters/replicas.py).
- No ``@app.timer``: faust timers are in-memory only (nothing here needs one).
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import faust
import mode
from faust.exceptions import ConsumerNotStarted
from faust.types import TP, Message
from pydantic import BaseModel

from chorus.base.errors import ConfigError
from chorus.base.logs import fields
from chorus.base.settings import EX_CONFIG
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.registry import Registry, load_registry
from chorus.kernel.kafka import KafkaAuth, kafka_auth
from chorus.kernel.records import Record
from chorus.observability.logs import setup_logging
from chorus.platform.outcome_analytics.adapters.deadletters import KafkaDeadLetters
from chorus.platform.outcome_analytics.adapters.http import routes
from chorus.platform.outcome_analytics.adapters.metrics import ViewCollector
from chorus.platform.outcome_analytics.adapters.replicas import LocalView, Replicas
from chorus.platform.outcome_analytics.adapters.topics import InternalTopics, ensure_internal_topics
from chorus.platform.outcome_analytics.bootstrap import bootstrap
from chorus.platform.outcome_analytics.config import SERVICE, Settings
from chorus.platform.outcome_analytics.domain import (
    ACCEPT,
    Bucket,
    BucketKey,
    Change,
    Observation,
    WorkflowState,
    fold,
    observe,
)
from chorus.platform.outcome_analytics.handlers import Deps, on_record
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


class HourChange(faust.Record, serializer="json"):
    """A :class:`~chorus.platform.outcome_analytics.domain.Change` on the wire between the
    workflows agent and the hours agent; a faust Record so that the windowed table can
    take its window from a field of it (``relative_to_field``)."""

    workflow_type: str
    at: float
    """The bucket's hour, epoch seconds (UTC): the event's own time, never the reading's."""
    measure: str
    label: str
    amount: int
    seconds: float | None = None

    def change(self) -> Change:
        return Change.model_validate(
            {
                "workflow_type": self.workflow_type,
                "hour": self.at,
                "measure": self.measure,
                "label": self.label,
                "amount": self.amount,
                "seconds": self.seconds,
            }
        )

    @classmethod
    def of(cls, change: Change) -> HourChange:
        return cls(
            workflow_type=change.workflow_type,
            at=change.hour.timestamp(),
            measure=change.measure,
            label=change.label,
            amount=change.amount,
            seconds=change.seconds,
        )


class Forward:
    """The reader's sink: what an event observes, sent on to its workflow's partition.

    ``observe`` returns once faust's producer has the record; faust flushes it before it
    commits the input's offset.
    """

    def __init__(self, topic: faust.types.TopicT) -> None:
        self.topic = topic

    async def observe(self, envelope: Envelope, payload: EventModel) -> None:
        seen = observe(envelope, payload)
        if seen is not None:
            await self.topic.send(key=seen.key.encode(), value=seen.model_dump_json().encode())


class Pipeline:
    """The faust app with its topics, tables and agents; nothing connects until a worker starts it."""

    def __init__(self, settings: Settings, inputs: list[str], topics: InternalTopics, datadir: Path) -> None:
        self.names = topics
        app = self.app = faust.App(
            topics.app_id,
            broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")],
            broker_credentials=faust_credentials(kafka_auth()),
            broker_commit_interval=settings.commit_interval_s,
            store="memory://",
            key_serializer="raw",
            value_serializer="raw",
            consumer_auto_offset_reset="earliest",
            table_standby_replicas=settings.standby_replicas,
            topic_partitions=topics.partitions,
            topic_disable_leader=True,
            topic_allow_declare=False,
            web_enabled=False,
            canonical_url=settings.advertised_url or f"http://{settings.http_host}:{settings.http_port}",
            autodiscover=False,
            datadir=str(datadir),
        )
        self.inputs = app.topic(
            *inputs,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            # A tombstone reaches the agent (and is dead-lettered), not skipped unseen.
            allow_empty=True,
        )
        self.by_workflow = app.topic(
            topics.by_workflow,
            partitions=topics.partitions,
            internal=True,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        self.by_type = app.topic(
            topics.by_type,
            partitions=topics.partitions,
            internal=True,
            key_type=bytes,
            value_type=HourChange,
            key_serializer="raw",
        )
        self.workflows = app.Table(
            topics.workflows_table, partitions=topics.partitions, key_type=str, value_type=bytes
        )
        # Windows never expire: faust expires them by the wall clock, and the view keeps
        # every hour still on the input topics (a rebuild would bring them back).
        self.hours = (
            app.Table(topics.hours_table, partitions=topics.partitions, key_type=str)
            .tumbling(timedelta(hours=1), expires=None)
            # HourChange.at is a field descriptor on the class (faust's models), a float on
            # an instance: typed as the latter.
            .relative_to_field(HourChange.at)  # type: ignore[arg-type]
        )
        self.positions: dict[tuple[str, int], int] = {}
        """(topic, partition) -> offset of the next record to read, of every agent."""
        self.failures = 0
        self.local = LocalView(self, topics)

    def agents(self, handle: Callable[[Record], Awaitable[None]], on_failure: Callable[[str], None]) -> None:
        """Attach the three agents (``handle``: the reader's step for one input record)."""
        positions = self.positions

        async def read(stream: faust.StreamT[bytes]) -> None:
            async for event in stream.events():
                # handle() never raises; when it returns the record is forwarded or its
                # dead letter is durable, and only then (on the next iteration) does faust
                # ack the offset.
                await handle(to_record(event.message))
                positions[(event.message.topic, event.message.partition)] = event.message.offset + 1

        async def workflows(stream: faust.StreamT[bytes]) -> None:
            async for event in stream.events():
                message = event.message
                try:
                    await self._fold(Observation.model_validate_json(event.value), message.partition)
                except Exception:
                    on_failure("workflows")
                    log.exception("fact not folded", extra=fields(partition=message.partition))
                positions[(message.topic, message.partition)] = message.offset + 1

        async def hours(stream: faust.StreamT[HourChange]) -> None:
            async for event in stream.events():
                message = event.message
                try:
                    self._count(event.value, message.partition, message.offset)
                except Exception:
                    on_failure("hours")
                    log.exception("change not counted", extra=fields(partition=message.partition))
                positions[(message.topic, message.partition)] = message.offset + 1

        self.app.agent(self.inputs, name=f"{SERVICE}.read", concurrency=1)(read)
        self.app.agent(self.by_workflow, name=f"{SERVICE}.workflows", concurrency=1)(workflows)
        self.app.agent(self.by_type, name=f"{SERVICE}.hours", concurrency=1)(hours)

    async def _fold(self, seen: Observation, partition: int) -> None:
        stored = self.workflows.get(seen.key)
        state = StoredWorkflow.model_validate_json(stored).state if stored else WorkflowState()
        before = state.model_dump_json()
        changes = fold(state, seen)
        if state.model_dump_json() != before:
            self.workflows[seen.key] = (
                StoredWorkflow(partition=partition, state=state).model_dump_json().encode()
            )
        for change in changes:
            await self.by_type.send(key=change.workflow_type.encode(), value=HourChange.of(change))

    def _count(self, change: HourChange, partition: int, offset: int) -> None:
        window = self.hours[change.workflow_type]
        try:
            slot = HourSlot.model_validate(window.value())
        except KeyError:
            slot = HourSlot(partition=partition, through=-1, bucket=Bucket().to_json())
        if offset <= slot.through:
            return  # read again after a crash: this bucket already took it
        bucket = Bucket.from_json(slot.bucket)
        bucket.apply(change.change())
        # An emptied bucket (its dead letters moved out of "unknown") is kept, with its
        # offset, and left out on reading: deleting it would forget what it took.
        slot = HourSlot(partition=partition, through=offset, bucket=bucket.to_json())
        self.hours[change.workflow_type] = slot.model_dump()

    # -- what LocalView reads ------------------------------------------------------------

    def workflow_states(self, partitions: set[int]) -> Iterator[WorkflowState]:
        for stored in list(self.workflows.values()):
            workflow = StoredWorkflow.model_validate_json(stored)
            if workflow.partition in partitions:
                yield workflow.state

    def hour_buckets(self, partitions: set[int]) -> Iterator[tuple[BucketKey, Bucket]]:
        # The windowed table's own keys: (workflow type, (window start, window end)).
        for (workflow_type, (start, _)), value in list(self.hours.table.data.items()):
            slot = HourSlot.model_validate(value)
            if slot.partition in partitions:
                hour = datetime.fromtimestamp(start, timezone.utc)
                yield BucketKey(workflow_type, hour), Bucket.from_json(slot.bucket)

    def served(self, topic: str) -> set[int]:
        """Partitions of ``topic`` whose state this replica holds, whole (none while a
        rebalance or a restore is under way)."""
        if not self.ready():
            return set()
        return {tp.partition for tp in self.assigned() if tp.topic == topic}

    def assigned(self) -> set[TP]:
        try:
            return set(self.app.consumer.assignment()) if self.app.started else set()
        except ConsumerNotStarted:  # the worker is up, its consumer thread not yet
            return set()

    def ready(self) -> bool:
        """Partitions assigned and every table restored: the local view is whole for them."""
        return bool(self.assigned()) and not self.app.rebalancing


class StoredWorkflow(BaseModel):
    """A workflow's state as its table keeps it: with the partition it belongs to (the
    in-memory store keeps a revoked partition's keys, so readers filter on it)."""

    partition: int
    state: WorkflowState


class HourSlot(BaseModel):
    """One bucket as the windowed table keeps it: its partition, and the offset on the
    by-type topic of the last change it took (a change read again is skipped)."""

    partition: int
    through: int
    bucket: dict[str, Any]


class Sidecar(mode.Service):
    """Starts the dead-letter producer and the HTTP server with the worker, stops them after."""

    def __init__(self, dead_letters: KafkaDeadLetters, http: HttpServer, replicas: Replicas) -> None:
        super().__init__()
        self.dead_letters = dead_letters
        self.http = http
        self.replicas = replicas

    async def on_start(self) -> None:
        await self.dead_letters.start()
        await self.http.start()
        log.info("outcome analytics listening", extra=fields(port=self.http.port))

    async def on_stop(self) -> None:
        await self.http.stop()
        await self.replicas.close()
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
    internal = InternalTopics.of(settings, registry, topics)
    with tempfile.TemporaryDirectory(prefix=f"{SERVICE}-") as datadir:
        pipeline = Pipeline(settings, topics, internal, Path(datadir))
        try:
            deps, dead_letters = bootstrap(settings, registry, Forward(pipeline.by_workflow))
            ensure_internal_topics(settings.kafka_bootstrap, internal)
        except ConfigError as exc:
            print(f"refusing to start: {exc}", file=sys.stderr)
            raise SystemExit(EX_CONFIG) from None
        serve(settings, pipeline, deps, dead_letters, topics)


def serve(
    settings: Settings, pipeline: Pipeline, deps: Deps, dead_letters: KafkaDeadLetters, topics: list[str]
) -> None:
    """Attach the agents and the HTTP server to the pipeline and run the worker."""

    async def handle(record: Record) -> None:
        await on_record(record, deps)

    pipeline.agents(handle, lambda stage: deps.metrics.failures.labels("unexpected", stage).inc())
    names = pipeline.names
    replicas = Replicas(pipeline.local, pipeline.app, timeout_s=settings.peer_timeout_s)

    async def health() -> dict[str, Any]:
        return {
            # "ok" once the group is joined, partitions are assigned and their tables are
            # restored; how far the view has got is in "positions".
            "status": "ok" if pipeline.ready() else "starting",
            "group": names.app_id,
            "topics": [*topics, names.by_workflow, names.by_type],
            "assigned_partitions": len(pipeline.assigned()),
            "assignment": sorted(f"{tp.topic}:{tp.partition}" for tp in pipeline.assigned()),
            "dead_letters_published": dead_letters.published,
            "positions": {f"{t}:{p}": offset for (t, p), offset in sorted(pipeline.positions.items())},
        }

    deps.metrics.registry.register(ViewCollector(pipeline.local))
    http = HttpServer(
        settings.http_host,
        settings.http_port,
        deps.metrics,
        health,
        title=SERVICE,
        api_keys=settings.api_keys,
    )
    http.include(routes(replicas))
    log.info("outcome analytics starting", extra=fields(group=names.app_id, topics=topics))
    worker = faust.Worker(
        pipeline.app,
        Sidecar(dead_letters, http, replicas),
        loglevel=settings.log_level,
        quiet=True,
        # chorus.base.logs owns logging (JSON lines with trace fields); mode would replace it.
        override_logging=False,
        redirect_stdouts=False,
    )
    worker.spinner = None  # a terminal progress spinner has no place in a service's output
    worker.execute_from_commandline()
