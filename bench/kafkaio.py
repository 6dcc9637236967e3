"""The driver's side of Kafka: ~1 KB envelopes built fast, backlogs produced, outputs read."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from chorus.contracts.base import EventModel
from chorus.contracts.envelope import ProducerRef
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.kafka import make_consumer

DRIVER = ProducerRef(service="bench_driver", version="0")
TARGET_BYTES = 1024

EPOCH_NS = time.time_ns()
"""This run's time origin. Times inside event payloads count from it: nanoseconds since
1970 (~1.8e18) are beyond the +-2^53 integers every JSON reader keeps exact, and Chorus
refuses such a record (a dead letter, not a number silently rounded)."""


def run_ns() -> int:
    """Nanoseconds since this run began (see EPOCH_NS)."""
    return time.time_ns() - EPOCH_NS


class EnvelopeFactory:
    """Valid envelopes of one event type from a template: a pydantic round per message
    would cost more than the services it feeds, so only ids and payload change."""

    def __init__(
        self,
        example: EventModel,
        workflow_type: str = "bench",
        subject_ref: str | None = None,
        producer: ProducerRef = DRIVER,
    ) -> None:
        env = start_envelope(
            example,
            workflow_id="wf-template",
            workflow_type=workflow_type,
            producer=producer,
            now=datetime.now(timezone.utc),
            idempotency_key="template",
            subject_ref=subject_ref,
        )
        self.template: dict[str, Any] = env.model_dump(mode="json")

    def make(self, workflow_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        body = dict(self.template)
        event_id = str(uuid.uuid4())
        body.update(
            event_id=event_id,
            workflow_id=workflow_id,
            correlation_id=workflow_id,
            idempotency_key=event_id,
            occurred_at=datetime.now(timezone.utc).isoformat(),
            payload=payload,
        )
        return body

    def encode(self, workflow_id: str, payload: dict[str, Any]) -> bytes:
        return json.dumps(self.make(workflow_id, payload)).encode()


def pad_for(factory: EnvelopeFactory, payload: dict[str, Any]) -> str:
    """Filler that brings one envelope to about TARGET_BYTES."""
    size = len(factory.encode("wf-" + "0" * 20, {**payload, "pad": ""}))
    return "x" * max(0, TARGET_BYTES - size)


async def produce_all(
    producer: AIOKafkaProducer,
    topic: str,
    messages: Sequence[tuple[bytes, bytes]],
    headers: Sequence[list[tuple[str, bytes]]] | None = None,
) -> None:
    """Send (key, value) pairs (with ``headers[i]`` each, if given) and wait until the
    broker acknowledged every one."""
    futures = [
        await producer.send(topic, value, key=key, headers=headers[i] if headers else None)
        for i, (key, value) in enumerate(messages)
    ]
    await asyncio.gather(*futures)


@dataclass
class Seen:
    recv_ns: int
    ts_ms: int
    sent_ns: int


class Listener:
    """Reads one output topic from the driver, keyed by what identifies a message.

    Paused while a throughput trial runs (so the driver takes no CPU from the
    measured process); live during latency trials, where receive time matters.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        key_of: Callable[[dict[str, Any]], Hashable],
        sent_of: Callable[[dict[str, Any]], int],
    ) -> None:
        self.topic = topic
        self.key_of = key_of
        self.sent_of = sent_of
        self.consumer = make_consumer(bootstrap, group_id=None, client_id="bench-listener")
        self.partitions: list[TopicPartition] = []
        self.seen: dict[Hashable, Seen] = {}
        self.waiters: dict[Hashable, asyncio.Future[Seen]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        parts = self.consumer.partitions_for_topic(self.topic)
        deadline = time.monotonic() + 30
        while not parts:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {self.topic} has no partitions in metadata")
            await self.consumer._client.force_metadata_update()
            parts = self.consumer.partitions_for_topic(self.topic)
        self.partitions = [TopicPartition(self.topic, p) for p in sorted(parts)]
        self.consumer.assign(self.partitions)
        await self.consumer.seek_to_end(*self.partitions)
        self.consumer.pause(*self.partitions)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.consumer.stop()

    async def end_offsets(self) -> dict[TopicPartition, int]:
        ends: dict[TopicPartition, int] = await self.consumer.end_offsets(self.partitions)
        return ends

    async def _run(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=50, max_records=2000)
            recv_ns = run_ns()  # before parsing, so parsing does not count as latency
            for records in batches.values():
                for r in records:
                    body = json.loads(r.value)
                    key = self.key_of(body)
                    seen = Seen(recv_ns, r.timestamp, self.sent_of(body))
                    self.seen.setdefault(key, seen)
                    waiter = self.waiters.pop(key, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(seen)

    def live(self, from_offsets: dict[TopicPartition, int] | None = None) -> None:
        for tp in self.partitions:
            if from_offsets is not None:
                self.consumer.seek(tp, from_offsets[tp])
        self.consumer.resume(*self.partitions)

    def pause(self) -> None:
        self.consumer.pause(*self.partitions)

    def expect(self, key: Hashable) -> asyncio.Future[Seen]:
        fut: asyncio.Future[Seen] = asyncio.get_running_loop().create_future()
        self.waiters[key] = fut
        return fut

    async def collect(
        self,
        from_offsets: dict[TopicPartition, int],
        keys: set[Hashable],
        timeout_s: float,
    ) -> dict[Hashable, Seen]:
        """Read from ``from_offsets`` until every key was seen; fail loudly on a shortfall."""
        self.live(from_offsets)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while True:
                missing = [k for k in keys if k not in self.seen]
                if not missing:
                    return {k: self.seen[k] for k in keys}
                if loop.time() > deadline:
                    raise RuntimeError(
                        f"{self.topic}: {len(missing)} of {len(keys)} outputs never arrived "
                        f"(e.g. {missing[:3]})"
                    )
                await asyncio.sleep(0.02)
        finally:
            self.pause()

    async def wait_count(self, start: dict[TopicPartition, int], n: int, timeout_s: float) -> float:
        """Poll end offsets until ``n`` records were appended after ``start``; returns wall time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            ends = await self.end_offsets()
            got = sum(ends[tp] - start[tp] for tp in self.partitions)
            if got >= n:
                return time.time()
            if loop.time() > deadline:
                raise RuntimeError(f"{self.topic}: only {got} of {n} outputs after {timeout_s:.0f}s")
            await asyncio.sleep(0.02)
