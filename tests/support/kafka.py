"""Producing and reading test topics directly (the test is the outside world here)."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy

from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope, Priority, ProducerRef
from chorus.contracts.procurement import budget_approval_id
from chorus.contracts.registry import Registry, default_registry
from chorus.kernel.codec import encode
from chorus.kernel.kafka import make_admin, make_consumer, make_producer, stop_client
from chorus.privacy.signing import Signer, Verifier, load_keys
from chorus.testing import make_event
from tests.support.events import approval_decided
from tests.support.sealed import opened


class _RawKey(str):
    raw = b""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self.raw


def raw_header_key(data: bytes) -> str:
    """A header key that aiokafka's pure-Python batch builder writes as ``data`` byte for
    byte (not UTF-8, say): bytes no Kafka client of ours writes, but a broker holds."""
    key = _RawKey("raw")
    key.raw = data
    return key


async def publish_with_raw_header_key(
    bootstrap: str, topic: str, value: bytes, *, key: bytes, header_key: bytes
) -> None:
    """One record whose header key is ``header_key`` byte for byte (not UTF-8, say), as a
    client in another language can write it: aiokafka's own builder encodes keys strictly,
    so this batch is built by its pure-Python builder, which asks the key for its bytes."""
    producer = make_producer(bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        batch = producer.create_batch()
        batch._builder = _DefaultRecordBatchBuilderPy(
            2, 0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20
        )
        batch.append(key=key, value=value, timestamp=None, headers=[(raw_header_key(header_key), b"1")])
        partitions = sorted(await producer.partitions_for(topic))
        partition = DefaultPartitioner()(key, partitions, partitions)
        await (await producer.send_batch(batch, topic, partition=partition))
    finally:
        await stop_client(producer)


def envelope(
    event: EventModel,
    *,
    workflow_id: str | None = None,
    workflow_type: str = "test",
    priority: Priority = "normal",
    traceparent: str | None = None,
    event_id: uuid.UUID | None = None,
) -> Envelope:
    """``event`` in a fresh envelope of its own workflow (chorus.testing.make_event's). The
    test plays the service that states it: a signed type names its one signer (and
    ``publish`` signs it as that service), a runtime's own command (a retry, a dead letter)
    the service it names; with several, ``stated_by`` names one."""
    env = make_event(event, workflow_id=workflow_id, workflow_type=workflow_type, priority=priority).envelope
    updates: dict[str, Any] = {}
    registry = _registry()
    signers, owner_field = (
        registry.signers_of(event.event_type),
        registry.own_commands().get(event.event_type),
    )
    if owner_field is not None:  # a runtime's command for itself: the service it names states it
        owner = str(env.payload[owner_field]).split(":", 1)[0]
        updates["producer"] = ProducerRef(service=owner, version="test")
    elif len(signers) == 1:
        updates["producer"] = ProducerRef(service=next(iter(signers)), version="test")
    if traceparent is not None:
        updates["traceparent"] = traceparent
    if event_id is not None:
        updates["event_id"] = event_id
    return env.model_copy(update=updates) if updates else env


def approval(workflow_id: str, producer: str = "approval_gate") -> Envelope:
    """A manager's approval of ``workflow_id``'s payment (approval.decided), claiming to
    come from ``producer``: the gate, or a forger."""
    decided = approval_decided(approval_id=budget_approval_id(workflow_id, 1))
    made = envelope(decided, workflow_id=workflow_id, workflow_type="procurement")
    return made.model_copy(update={"producer": ProducerRef(service=producer, version="0.1.0")})


_registry = functools.cache(default_registry)


def stated_by(value: Envelope, service: str) -> Envelope:
    """``value`` as ``service`` produces it (with ``publish``, signed by it when the registry
    says only that service may state it)."""
    return value.model_copy(update={"producer": ProducerRef(service=service, version="test")})


async def refused_by(
    bootstrap: str,
    registry: Registry,
    value: Envelope,
    services: set[str],
    timeout_s: float = 60.0,
    category: str = "unauthorized",
) -> None:
    """Until each of ``services`` dead-lettered ``value`` as ``category``: it read the
    record and did not act on it."""
    forged = encode(value)

    def refused(records: list[ConsumerRecord[bytes, bytes]]) -> bool:
        letters = [e["payload"] for e in events_of(records, "event.dead_lettered")]
        refusals = [p for p in letters if p["error"]["category"] == category and p["service"] in services]
        return services <= {
            p["service"] for p in refusals if base64.b64decode(opened(p["original"])["value_b64"]) == forged
        }

    topic = registry.physical_topic("event.dead_lettered")
    await read_topic(bootstrap, [topic], until=refused, timeout_s=timeout_s)


def local_verifier(registry: Registry) -> Verifier:
    """What a runtime consumer of ``registry`` checks signed types with: the local public
    keys (CHORUS_SIGNING_DIR)."""
    signing_dir = os.environ.get("CHORUS_SIGNING_DIR", "")
    keys = load_keys(
        signing_dir, "tests", signs=set(), checks=registry.signed_by(), endings=registry.endings()
    )
    return keys.verifier


def signed(value: Envelope, headers: list[tuple[str, bytes]] | None) -> list[tuple[str, bytes]] | None:
    """``headers`` plus the producer's signature when ``value`` is a signed (decision) event
    that names its real producer: the test plays that producer, with the local key
    (CHORUS_SIGNING_DIR holds every local private key). A forger's envelope (another
    producer) is left unsigned."""
    producer = value.producer.service
    if producer not in _registry().signers_of(value.event_type):
        return headers
    return [*(headers or []), local_signer(producer).header(encode(value))]


def local_signer(service: str) -> Signer:
    """``service``'s signer with its local key (CHORUS_SIGNING_DIR holds every local
    private key): a test that plays that service."""
    keys = load_keys(os.environ.get("CHORUS_SIGNING_DIR", ""), service, signs={"*"}, checks={})
    assert keys.signer is not None
    return keys.signer


async def publish(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes | Envelope],
    *,
    key: bytes | None = None,
    headers: list[tuple[str, bytes]] | None = None,
    sign: bool = True,
) -> None:
    """Publish ``values`` (envelopes keyed by workflow id); decision events are signed by
    the producer they name unless ``sign`` is False."""
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        for value in values:
            if isinstance(value, Envelope):
                with_signature = signed(value, headers) if sign else headers
                await producer.send(
                    topic, encode(value), key=value.workflow_id.encode(), headers=with_signature
                )
            else:
                await producer.send(topic, value, key=key, headers=headers)
        await producer.flush()
    finally:
        await stop_client(producer)


async def read_to_end(bootstrap: str, topic: str) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` written before this call (a check that something was
    never stated, once whoever would have stated it is known to be past it)."""
    consumer = make_consumer(bootstrap, topic, group_id=None)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        starts, ends = await consumer.beginning_offsets(partitions), await consumer.end_offsets(partitions)
    finally:
        await stop_client(consumer)
    total = sum(ends[p] - starts[p] for p in partitions)  # no compacted topic carries events
    return await read_topic(bootstrap, [topic], until=lambda records: len(records) >= total)


async def read_topic(
    bootstrap: str,
    topics: Sequence[str],
    *,
    until: Callable[[list[ConsumerRecord[bytes, bytes]]], bool],
    timeout_s: float = 60.0,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Read from the beginning until ``until(records)`` holds; fails loudly on timeout."""
    consumer = make_consumer(bootstrap, *topics, group_id=None)
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while not until(records):
            if loop.time() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s}s reading {list(topics)}; got {len(records)} records: "
                    + "; ".join(summarize(r) for r in records[-10:])
                )
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
    finally:
        await stop_client(consumer)
    return records


def summarize(record: ConsumerRecord[bytes, bytes]) -> str:
    try:
        body = json.loads(record.value or b"")
        return f"{body.get('event_type')}@{record.topic}:{record.offset}"
    except (ValueError, RecursionError, AttributeError):
        return f"<raw {len(record.value or b'')} bytes>@{record.topic}:{record.offset}"


def events_of(records: Sequence[ConsumerRecord[bytes, bytes]], event_type: str) -> list[dict[str, Any]]:
    out = []
    for r in records:
        try:
            body = json.loads(r.value or b"")
        except (ValueError, RecursionError):  # hostile records on purpose
            continue
        if isinstance(body, dict) and body.get("event_type") == event_type:
            out.append(body)
    return out


async def dump_topics(bootstrap: str) -> list[bytes]:
    """Every record of every topic on the broker, from offset 0, as a plain client reads it:
    each record's value, key and header values (what an attacker with a copy of the log
    has)."""
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        topics = await admin.list_topics()
    finally:
        await admin.close()
    consumer = make_consumer(bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    blobs: list[bytes] = []
    try:
        partitions = [
            TopicPartition(topic, p)
            for topic in sorted(topics)
            for p in sorted(consumer.partitions_for_topic(topic) or await _partitions(consumer, topic))
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        left = {tp for tp, end in ends.items() if end > 0}
        while left:
            for tp, batch in (await consumer.getmany(*left, timeout_ms=500)).items():
                for r in batch:
                    blobs.extend([r.value or b"", r.key or b"", *(v for _, v in r.headers)])
                if batch and batch[-1].offset + 1 >= ends[tp]:
                    left.discard(tp)
            for tp in list(left):
                if await consumer.position(tp) >= ends[tp]:  # compacted or transaction markers
                    left.discard(tp)
    finally:
        await stop_client(consumer)
    return blobs


async def _partitions(consumer: Any, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()
    return consumer.partitions_for_topic(topic) or set()
