"""``chorus produce`` and ``chorus subscribe``: events onto and off the registry's topics, by hand.

Both take the registry from ``--schemas-dir`` / ``CHORUS_SCHEMAS_DIR`` (default:
``schemas/`` of this checkout) and the broker from ``--bootstrap`` /
``CHORUS_KAFKA_BOOTSTRAP``.

Exit codes (sysexits.h where one fits): 0 ok; 2 usage (bad option values, a
registry that does not load); 65 EX_DATAERR (unknown event type or topic, data
that is not JSON or not valid for the event's model); 66 EX_NOINPUT (the --data
file cannot be read); 69 EX_UNAVAILABLE (no broker at the address, or the topic
is not on it); 130 interrupted.
"""

from __future__ import annotations

import asyncio
import base64
import difflib
import json
import re
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Annotated, Any

import typer
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
)
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from chorus import __version__
from chorus.base.compat import StrEnum, fromisoformat
from chorus.base.errors import DecodeError
from chorus.base.settings import LOCAL_KAFKA
from chorus.contracts.envelope import Envelope, Priority, ProducerRef
from chorus.contracts.registry import Registry
from chorus.kernel.codec import decode, encode, pointer
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.kafka import kafka_auth, make_admin, make_consumer, make_producer, stop_client
from chorus.kernel.outbox import envelope_headers
from chorus.tools.cli.options import (
    EX_NOPERM,
    Bootstrap,
    SchemasDir,
    complete_event_types,
    complete_topics,
    fail,
    quiet_client_logs,
    registry_of,
)
from chorus.tools.topics import EX_UNAVAILABLE, BrokerUnavailableError, ProvisioningError, described_topics

EX_USAGE = 2  # click's own code for bad usage; kept so every usage error exits alike
EX_DATAERR = 65
EX_NOINPUT = 66
EX_INTERRUPTED = 130
CLI_PRODUCER = ProducerRef(service="chorus-cli", version=__version__)
DEFAULT_WORKFLOW_TYPE = "adhoc"
MAX_ERRORS_SHOWN = 20


class Lane(StrEnum):
    high = "high"
    normal = "normal"
    low = "low"


PLATFORM_TOPICS = "chorus."
"""The platform's own topics (chorus.control, chorus.timers, chorus.data, ...)."""


class CliError(Exception):
    """A message for the user and the exit code that goes with it."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# -- produce ------------------------------------------------------------------------------------


def produce(
    event_type: Annotated[
        str,
        typer.Argument(
            help="Event type of the registry, e.g. invoice.received.", autocompletion=complete_event_types
        ),
    ],
    *,
    data: Annotated[
        str,
        typer.Option("--data", "-d", help="The payload: @file.json, - for stdin, or inline JSON text."),
    ],
    workflow_id: Annotated[
        str | None,
        typer.Option("--workflow-id", help="Workflow (and Kafka key); default: a new id."),
    ] = None,
    workflow_type: Annotated[
        str, typer.Option("--workflow-type", help="Workflow type in the envelope.")
    ] = DEFAULT_WORKFLOW_TYPE,
    priority: Annotated[
        Lane,
        typer.Option("--priority", case_sensitive=False, help="Priority (lane on laned topics)."),
    ] = Lane.normal,
    schema_version: Annotated[
        int | None, typer.Option("--schema-version", min=1, help="Default: the latest version.")
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Default: derived from the event id.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the envelope as JSON; publish nothing.")
    ] = False,
    schemas_dir: SchemasDir = None,
    bootstrap: Bootstrap = LOCAL_KAFKA,
) -> None:
    """Validate a payload against the registry's model and publish it as a new workflow's event.

    The envelope is a start envelope (producer chorus-cli, new event id, a new
    trace). It goes to the event's topic (the lane of --priority on laned topics)
    with the workflow id as key, through an idempotent acks=all producer, and the
    command prints where it landed. Nothing is published when validation fails.
    """
    with _cli_errors("produce"):
        registry = registry_of("produce", schemas_dir)
        payload_data = read_data(data)
        envelope, ignored = build_envelope(
            registry,
            event_type,
            payload_data,
            workflow_id=workflow_id,
            workflow_type=workflow_type,
            priority=priority.value,
            schema_version=schema_version,
            idempotency_key=idempotency_key,
            now=datetime.now(timezone.utc),
        )
        for pointer in ignored:
            typer.echo(
                f"chorus produce: warning: {pointer} is not a field of"
                f" {event_type} v{envelope.schema_version}; it is not sent",
                err=True,
            )
        topic = registry.physical_topic(event_type, envelope.priority)
        if dry_run:
            typer.echo(json.dumps(envelope.model_dump(mode="json"), indent=2, ensure_ascii=False))
            typer.echo(f"dry run: would publish to {topic} with key {envelope.workflow_id}", err=True)
            return
        with quiet_client_logs():
            partition, offset = asyncio.run(publish_envelope(bootstrap, topic, envelope))
        typer.echo(
            f"published {envelope.event_id} ({event_type} v{envelope.schema_version},"
            f" workflow {envelope.workflow_id}) to {topic} partition {partition} offset {offset}"
        )


def read_data(spec: str) -> Any:
    """``@path`` (a file), ``-`` (stdin) or inline JSON -> the parsed JSON value."""
    if spec == "-":
        text, origin = sys.stdin.read(), "stdin"
    elif spec.startswith("@"):
        path = Path(spec[1:])
        try:
            text, origin = path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read --data file {path}: {exc}", EX_NOINPUT) from None
    else:
        text, origin = spec, "--data"
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliError(f"{origin} is not JSON: {exc}", EX_DATAERR) from None


def build_envelope(
    registry: Registry,
    event_type: str,
    data: Any,
    *,
    workflow_id: str | None,
    workflow_type: str,
    priority: Priority,
    schema_version: int | None,
    idempotency_key: str | None,
    now: datetime,
) -> tuple[Envelope, list[str]]:
    """The envelope for ``data`` as ``event_type``, and the pointers of input fields not sent.

    Raises CliError (EX_DATAERR) naming the closest event types for an unknown one,
    and every invalid field by JSON pointer with what was expected and what came.
    """
    if not registry.knows(event_type):
        raise CliError(unknown_name_message("event type", event_type, registry.event_types()), EX_DATAERR)
    topic = registry.topic_for(event_type).topic
    if topic.startswith(PLATFORM_TOPICS):
        # Timers, retries, dead letters, data requests: the runtime's and the platform
        # services' own commands, each with its own API where a person may act on them.
        raise CliError(
            f"{event_type} is a platform command ({topic}): `chorus produce` publishes workflow "
            "events only. Redrive or discard dead letters with `chorus dlq`, erase with "
            "`chorus erase`, roll out with `chorus rollout`",
            EX_DATAERR,
        )
    signers = registry.signers_of(event_type)
    starts = sorted(name for name, workflow in registry.workflows.items() if workflow.start == event_type)
    if signers and starts:
        # Only the gateway's start counts: it records the submitter, the deadline and the callback.
        raise CliError(
            f"{event_type} starts a {starts[0]} workflow and is signed by {', '.join(sorted(signers))}: "
            f"start one through the gateway with `chorus workflows start {starts[0]} --data ...`",
            EX_DATAERR,
        )
    if signers:
        # Its consumers dead-letter it from anyone but its signers (chorus.privacy.signing).
        named = ", ".join(sorted(signers))
        raise CliError(
            f"{event_type} carries authority and is signed by {named}: consumers refuse it from "
            "anyone else. Decide through the gateway's API (approvals) or the dead-letter service "
            "(discards) instead",
            EX_DATAERR,
        )
    versions = registry.versions(event_type)
    version = schema_version or max(versions)
    if version not in versions:
        raise CliError(f"{event_type} has no version {version} (versions: {versions})", EX_DATAERR)
    try:
        model = registry.model(event_type, version)
    except KeyError:
        raise CliError(
            f"{event_type} v{version} is in the registry but has no model in chorus.contracts"
            " (registry and code are out of step)",
            EX_DATAERR,
        ) from None
    if not isinstance(data, dict):
        raise CliError(
            f"the {event_type} payload must be a JSON object, not {type(data).__name__}", EX_DATAERR
        )
    try:
        payload = model.model_validate(data)
    except ValidationError as exc:
        raise CliError(invalid_message(f"{event_type} v{version} payload", exc), EX_DATAERR) from None
    event_id = uuid.uuid4()
    try:
        envelope = start_envelope(
            payload,
            workflow_id=workflow_id or f"wf-cli-{uuid.uuid4().hex[:12]}",
            workflow_type=workflow_type,
            producer=CLI_PRODUCER,
            now=now,
            idempotency_key=idempotency_key or f"chorus-cli-{event_id}",
            event_id=event_id,
            priority=priority,
        )
        # What consumers will do with these bytes: refuse nothing they would refuse.
        decode(encode(envelope), registry)
    except ValidationError as exc:
        raise CliError(invalid_message("envelope", exc), EX_DATAERR) from None
    except DecodeError as exc:
        raise CliError(f"the envelope would not decode: {exc}", EX_DATAERR) from None
    return envelope, ignored_fields(data, payload.model_dump(mode="json"))


def ignored_fields(given: Any, sent: Any, prefix: str = "") -> list[str]:
    """Pointers of object members in ``given`` that the model dropped (models ignore extras)."""
    if isinstance(given, dict) and isinstance(sent, dict):
        out: list[str] = []
        for key, value in given.items():
            pointer = f"{prefix}/{str(key).replace('~', '~0').replace('/', '~1')}"
            if key not in sent:
                out.append(pointer)
            else:
                out.extend(ignored_fields(value, sent[key], pointer))
        return out
    if isinstance(given, list) and isinstance(sent, list) and len(given) == len(sent):
        return [
            p
            for i, (g, s) in enumerate(zip(given, sent, strict=True))
            for p in ignored_fields(g, s, f"{prefix}/{i}")
        ]
    return []


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "a boolean",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
    "datetime_type": "an RFC 3339 date-time with offset",
    "datetime_parsing": "an RFC 3339 date-time with offset",
    "datetime_from_date_parsing": "an RFC 3339 date-time with offset",
    "uuid_type": "a UUID string",
    "uuid_parsing": "a UUID string",
}


def invalid_message(what: str, exc: ValidationError) -> str:
    """``<what> is invalid:`` then one line per field: pointer, problem, expected, got."""
    errors = exc.errors(include_url=False)
    lines = [f"{what} is invalid:"]
    for error in errors[:MAX_ERRORS_SHOWN]:
        where = pointer(tuple(error["loc"]))
        if error["type"] == "missing":
            lines.append(f"  {where}: required field is missing")
            continue
        got = json.dumps(error.get("input"), default=str, ensure_ascii=False)
        got = got if len(got) <= 80 else got[:77] + "..."
        lines.append(f"  {where}: {error['msg']} (expected {expected_of(error)}, got {got})")
    if len(errors) > MAX_ERRORS_SHOWN:
        lines.append(f"  ... and {len(errors) - MAX_ERRORS_SHOWN} more")
    return "\n".join(lines)


def expected_of(error: Mapping[str, Any]) -> str:
    """What the schema wants at the failing field, in JSON Schema's words where possible."""
    kind = str(error["type"])
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    if kind == "literal_error":
        return f"one of {ctx.get('expected')}"
    if kind == "string_too_short":
        return f"a string of at least {ctx.get('min_length')} characters"
    if kind == "string_too_long":
        return f"a string of at most {ctx.get('max_length')} characters"
    if kind == "string_pattern_mismatch":
        return f"a string matching {ctx.get('pattern')}"
    if kind == "too_short":
        return f"at least {ctx.get('min_length')} items"
    for bound, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if bound in ctx:
            return f"a number {sign} {ctx[bound]}"
    return kind


async def publish_envelope(bootstrap: str, topic: str, envelope: Envelope) -> tuple[int, int]:
    """Publish and wait for the broker's ack; returns (partition, offset).

    Raises CliError (EX_UNAVAILABLE) when no broker answers or the topic does not
    exist (checked first: a missing topic would be auto-created by brokers that
    allow it, with their defaults rather than the registry's).
    """
    await _require_topics(bootstrap, [topic])
    producer = make_producer(bootstrap, client_id="chorus-cli")
    try:
        await producer.start()
        metadata = await producer.send_and_wait(
            topic,
            encode(envelope),
            key=envelope.workflow_id.encode(),
            headers=envelope_headers(envelope),
        )
    except (KafkaConnectionError, KafkaTimeoutError, TimeoutError, asyncio.TimeoutError) as exc:
        raise _unavailable(bootstrap, exc) from None
    finally:
        await stop_client(producer)
    return metadata.partition, metadata.offset


# -- subscribe ----------------------------------------------------------------------------------


def subscribe(
    target: Annotated[
        str,
        typer.Argument(
            help="A topic (logical or physical) or an event type of the registry.",
            autocompletion=complete_topics,
        ),
    ],
    *,
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the earliest retained record.")
    ] = False,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Start at records this old: 90s, 15m, 1h, 2d, or an ISO time."),
    ] = None,
    filters: Annotated[
        list[str] | None,
        typer.Option(
            "--filter",
            help="FIELD=VALUE on the envelope (workflow_id, producer.service, payload.outcome,"
            " ...); repeat to require several.",
        ),
    ] = None,
    json_lines: Annotated[
        bool, typer.Option("--json", help="One JSON envelope per line (for piping).")
    ] = False,
    group: Annotated[
        str | None,
        typer.Option("--group", help="Read as this consumer group and commit (resume next time)."),
    ] = None,
    max_events: Annotated[
        int | None, typer.Option("--max", min=1, help="Stop after printing this many records.")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0, help="Stop after this many seconds.")
    ] = None,
    exit_at_end: Annotated[
        bool,
        typer.Option("--exit-at-end", "-e", help="Stop once the last record there was at the start is read."),
    ] = False,
    partitions: Annotated[
        list[int] | None,
        typer.Option("--partition", "-p", min=0, help="Read only this partition (repeatable)."),
    ] = None,
    offset: Annotated[
        int | None,
        typer.Option(
            "--offset",
            "-o",
            help="Start at this offset in each partition; negative: that many before the end.",
        ),
    ] = None,
    keys: Annotated[bool, typer.Option("--keys", help="Show each record's key.")] = False,
    headers: Annotated[bool, typer.Option("--headers", help="Show each record's headers.")] = False,
    schemas_dir: SchemasDir = None,
    bootstrap: Bootstrap = LOCAL_KAFKA,
) -> None:
    """Tail events: new ones by default, or from the beginning, an offset, or a time.

    Without --group nothing is committed: partitions are assigned directly and
    sought (--since finds the first offset at that time in each partition). With
    --group the group's committed offsets are the start (--from-beginning or
    --since override them) and what is printed is committed. Records that are not
    valid events are printed as undecodable, with the reason; a --filter on
    workflow_id applies to them through their key, other filters cannot and let
    them through.
    """
    starts = [
        name
        for name, given in (
            ("--from-beginning", from_beginning),
            ("--since", since is not None),
            ("--offset", offset is not None),
        )
        if given
    ]
    if len(starts) > 1:
        raise typer.BadParameter(f"use one of {', '.join(starts)}, not several")
    if group is not None and (exit_at_end or partitions or offset is not None):
        # A group's partitions move between its members: "the end", a partition and an
        # offset are about partitions this command reads on its own.
        raise typer.BadParameter("--exit-at-end, --partition and --offset read without --group")
    try:
        start_at = parse_since(since, datetime.now(timezone.utc)) if since is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--since") from None
    try:
        wanted = parse_filters(filters or [])
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--filter") from None
    with _cli_errors("subscribe"):
        registry = registry_of("subscribe", schemas_dir)
        topics, event_type = resolve_target(registry, target)
        tail = Tail(
            registry=registry,
            topics=topics,
            event_type=event_type,
            filters=wanted,
            json_lines=json_lines,
            max_events=max_events,
            partitions=set(partitions or ()),
            offset=offset,
            exit_at_end=exit_at_end,
            keys=keys,
            headers=headers,
        )
        try:
            with quiet_client_logs():
                shown = asyncio.run(
                    tail.run(
                        bootstrap,
                        group=group,
                        from_beginning=from_beginning,
                        start_at=start_at,
                        timeout_s=timeout,
                    )
                )
        except KeyboardInterrupt:
            raise typer.Exit(EX_INTERRUPTED) from None
        typer.echo(f"{shown} record(s) from {', '.join(topics)}", err=True)


def resolve_target(registry: Registry, target: str) -> tuple[list[str], str | None]:
    """(physical topics, event type to keep or None) for an event type or a topic name."""
    if registry.knows(target):
        return registry.topic_for(target).physical_topics(), target
    if target in registry.topics:
        return registry.topics[target].physical_topics(), None
    if registry.topic_of_physical(target) is not None:
        return [target], None
    names = [*registry.event_types(), *registry.topics]
    names += [p for spec in registry.topics.values() for p in spec.physical_topics()]
    raise CliError(unknown_name_message("topic or event type", target, sorted(set(names))), EX_DATAERR)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: datetime) -> datetime:
    """``90s``, ``15m``, ``1h``, ``2d``, ``1w`` before ``now``, or an ISO time (UTC if naive)."""
    match = _DURATION.match(text.strip())
    if match:
        return now - timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    try:
        moment = fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is neither a duration (90s, 15m, 1h, 2d) nor an ISO time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def parse_filters(specs: Sequence[str]) -> dict[str, str]:
    """``["workflow_id=wf-1", "payload.outcome=failed"]`` -> {path: value}."""
    wanted: dict[str, str] = {}
    for spec in specs:
        path, sep, value = spec.partition("=")
        if not sep or not path.strip():
            raise ValueError(f"{spec!r} is not FIELD=VALUE")
        wanted[path.strip()] = value
    return wanted


def field_value(body: Mapping[str, Any], path: str) -> str | None:
    """The value at a dotted path of a JSON object, as filter text (strings bare, else JSON)."""
    value: Any = body
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value if isinstance(value, str) else json.dumps(value)


@dataclass
class Tail:
    """Reads records and prints those that pass; counts what it printed."""

    registry: Registry
    topics: list[str]
    event_type: str | None
    filters: dict[str, str]
    json_lines: bool
    max_events: int | None
    partitions: set[int] = field(default_factory=set)
    """Only these partitions (all when empty)."""
    offset: int | None = None
    """Start offset in each partition; negative counts back from the end."""
    exit_at_end: bool = False
    keys: bool = False
    headers: bool = False
    shown: int = 0
    _ends: dict[TopicPartition, int] = field(default_factory=dict)
    """--exit-at-end: each partition's end when reading began (what is left to read)."""
    console: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=True))

    async def run(
        self,
        bootstrap: str,
        *,
        group: str | None,
        from_beginning: bool,
        start_at: datetime | None,
        timeout_s: float | None,
    ) -> int:
        """Print until --max records or --timeout seconds (forever without both)."""
        partitions = await _require_topics(bootstrap, self.topics)
        if self.partitions:
            unknown = self.partitions - {tp.partition for tp in partitions}
            if unknown:
                raise CliError(
                    f"no partition {', '.join(map(str, sorted(unknown)))} in {', '.join(self.topics)}"
                    f" (partitions 0..{max(tp.partition for tp in partitions)})",
                    EX_DATAERR,
                )
            partitions = [tp for tp in partitions if tp.partition in self.partitions]
        consumer = make_consumer(
            bootstrap,
            group_id=group,
            client_id="chorus-cli",
            # Where a group with no committed offset starts: like `tail -f`, at the end.
            auto_offset_reset="earliest" if from_beginning else "latest",
        )
        try:
            await consumer.start()
            seek = _Seek(consumer, from_beginning, start_at, group is None)
            if group is None:
                consumer.assign(partitions)
                if self.offset is not None:
                    await self._seek_offset(consumer, partitions)
                else:
                    await seek.apply(partitions)
                if self.exit_at_end:
                    ends = await consumer.end_offsets(partitions)
                    self._ends = {tp: end for tp, end in ends.items() if await consumer.position(tp) < end}
                    if not self._ends:
                        return self.shown  # nothing to read
            else:
                consumer.subscribe(self.topics, listener=seek)
            await self._loop(consumer, commit=group is not None, timeout_s=timeout_s)
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            raise _unavailable(bootstrap, exc) from None
        finally:
            await stop_client(consumer)
        return self.shown

    async def _seek_offset(self, consumer: AIOKafkaConsumer, partitions: Sequence[TopicPartition]) -> None:
        assert self.offset is not None
        firsts = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
        for tp in partitions:
            wanted = self.offset if self.offset >= 0 else ends[tp] + self.offset
            consumer.seek(tp, min(max(wanted, firsts[tp]), ends[tp]))  # within what is retained

    async def _loop(self, consumer: AIOKafkaConsumer, *, commit: bool, timeout_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s if timeout_s is not None else None
        while not self._done():
            wait_ms = 500
            if deadline is not None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return
                wait_ms = max(1, min(wait_ms, int(remaining * 1000)))
            batch = await consumer.getmany(timeout_ms=wait_ms)
            handled: dict[TopicPartition, int] = {}
            for tp, records in batch.items():
                for record in records:
                    if self._done():
                        break
                    self._show(record)
                    handled[tp] = record.offset + 1
                    if tp in self._ends and record.offset + 1 >= self._ends[tp]:
                        del self._ends[tp]
            if commit and handled:
                # Exactly what was handled: a --max stop mid-batch leaves the rest for next time.
                await consumer.commit(handled)

    def _done(self) -> bool:
        if self.exit_at_end and not self._ends:
            return True
        return self.max_events is not None and self.shown >= self.max_events

    def _show(self, record: ConsumerRecord[bytes, bytes]) -> None:
        try:
            event = decode(record.value, self.registry)
        except Exception as exc:  # any failure to decode is shown, never fatal
            if self._key_passes(record.key):
                self._print_undecodable(record, exc)
            return
        body = json.loads(event.raw)
        if self.event_type is not None and event.event_type != self.event_type:
            return
        if any(field_value(body, path) != value for path, value in self.filters.items()):
            return
        self.shown += 1
        if self.json_lines:
            # The record's own bytes: what is on the topic, byte for byte.
            line = event.raw if b"\n" not in event.raw else json.dumps(body).encode()
            _write_line(line)
        else:
            self._print_event(record, event.envelope)

    def _key_passes(self, key: bytes | None) -> bool:
        wanted = self.filters.get("workflow_id")
        return wanted is None or (key or b"").decode("utf-8", "replace") == wanted

    def _print_undecodable(self, record: ConsumerRecord[bytes, bytes], error: Exception) -> None:
        self.shown += 1
        value = record.value or b""
        if self.json_lines:
            _write_line(
                json.dumps(
                    {
                        "undecodable": True,
                        "topic": record.topic,
                        "partition": record.partition,
                        "offset": record.offset,
                        "timestamp_ms": record.timestamp,
                        "key": record.key.decode("utf-8", "replace") if record.key else None,
                        "error": f"{type(error).__name__}: {error}",
                        "value_b64": base64.b64encode(value).decode(),
                    }
                ).encode()
            )
            return
        preview = value[:60].decode("utf-8", "replace")
        self.console.print(
            f"[bold red]undecodable[/] {escape(_where(record))}"
            f" [red]{escape(type(error).__name__)}: {escape(str(error))}[/]"
            f" ({len(value)} bytes: {escape(repr(preview))})"
        )

    def _print_event(self, record: ConsumerRecord[bytes, bytes], envelope: Envelope) -> None:
        payload = json.dumps(envelope.payload, ensure_ascii=False, separators=(",", ":"))
        if len(payload) > 240:
            payload = payload[:237] + "..."
        when = envelope.occurred_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
        self.console.print(
            f"[dim]{when}[/] [cyan]{escape(envelope.event_type)}[/] v{envelope.schema_version}"
            f" [bold]{escape(envelope.workflow_id)}[/] ({escape(envelope.workflow_type)},"
            f" {envelope.priority}) [dim]{escape(_where(record))} id={envelope.event_id}"
            f" by {escape(envelope.producer.service)}[/]{escape(self._extras(record))} {escape(payload)}"
        )

    def _extras(self, record: ConsumerRecord[bytes, bytes]) -> str:
        """`` key=... headers={...}`` when asked for (human output; --json prints the value)."""
        shown = ""
        if self.keys:
            shown += f" key={(record.key or b'').decode('utf-8', 'replace')!r}"
        if self.headers:
            found = {k: v.decode("utf-8", "replace") for k, v in record.headers}
            shown += f" headers={json.dumps(found, ensure_ascii=False, sort_keys=True)}"
        return shown


@dataclass(eq=False)
class _Seek(ConsumerRebalanceListener):  # type: ignore[misc]
    """Moves newly assigned partitions to the requested start, once per partition."""

    consumer: AIOKafkaConsumer
    from_beginning: bool
    start_at: datetime | None
    to_end_by_default: bool
    sought: set[TopicPartition] = field(default_factory=set)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        return None

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.apply(sorted(assigned - self.sought))

    async def apply(self, partitions: Sequence[TopicPartition]) -> None:
        # Only once per partition: a later rebalance must not replay what was printed.
        self.sought.update(partitions)
        if not partitions:
            return
        if self.from_beginning:
            await self.consumer.seek_to_beginning(*partitions)
        elif self.start_at is not None:
            stamp = int(self.start_at.timestamp() * 1000)
            found = await self.consumer.offsets_for_times({tp: stamp for tp in partitions})
            for tp in partitions:
                hit = found.get(tp)
                if hit is None:
                    await self.consumer.seek_to_end(tp)  # nothing that recent: only new ones
                else:
                    self.consumer.seek(tp, hit.offset)
        elif self.to_end_by_default:
            await self.consumer.seek_to_end(*partitions)


def _where(record: ConsumerRecord[bytes, bytes]) -> str:
    return f"{record.topic}[{record.partition}]@{record.offset}"


def _write_line(line: bytes) -> None:
    # Bytes, not text: the JSON goes out exactly as it is on the topic, whatever the locale.
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.buffer.flush()


# -- shared -------------------------------------------------------------------------------------


def unknown_name_message(kind: str, name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if close:
        return f"unknown {kind} {name!r}; did you mean {', '.join(close)}?"
    return f"unknown {kind} {name!r}; known: {', '.join(known)}"


async def _require_topics(bootstrap: str, topics: Sequence[str]) -> list[TopicPartition]:
    """Every partition of ``topics``; CliError (EX_UNAVAILABLE) when a topic is missing."""
    admin = make_admin(bootstrap, client_id="chorus-cli")
    try:
        await admin.start()
        # Partitions only: a topic's configs are an administrator's to read, and produce or
        # subscribe as an operator or auditor must not need them.
        actual = await described_topics(admin, topics)
    except (KafkaConnectionError, KafkaTimeoutError, TimeoutError, asyncio.TimeoutError) as exc:
        raise _unavailable(bootstrap, exc) from None
    finally:
        await admin.close()
    missing = [t for t in topics if t not in actual]
    if missing:
        raise CliError(
            f"topic {', '.join(missing)} does not exist on {bootstrap}:"
            " create the registry's topics with `chorus topics apply`",
            EX_UNAVAILABLE,
        )
    return [
        TopicPartition(t, n) for t in topics for n in sorted(p["partition"] for p in actual[t]["partitions"])
    ]


def _unavailable(bootstrap: str, exc: BaseException) -> CliError:
    return CliError(str(BrokerUnavailableError(bootstrap, type(exc).__name__)), EX_UNAVAILABLE)


@contextmanager
def _cli_errors(command: str) -> Iterator[None]:
    """Every failure as one line and an exit code, never a traceback: what the broker
    refused (and to whom, the login's principal) is what the user needs to act on."""
    try:
        yield
    except CliError as exc:
        fail(command, str(exc), exc.code)
    except (
        TopicAuthorizationFailedError,
        GroupAuthorizationFailedError,
        ClusterAuthorizationFailedError,
    ) as exc:
        login = kafka_auth().sasl_username or "this client"
        fail(command, f"the broker refused {login}: {type(exc).__name__} ({exc})", EX_NOPERM)
    except (KafkaError, ProvisioningError) as exc:
        fail(command, f"Kafka failed: {type(exc).__name__}: {exc}", EX_UNAVAILABLE)
