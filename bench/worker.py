"""One measured process: the raw aiokafka loop or a Chorus service, steered over stdin.

The driver (bench.run) starts each variant as its own OS process, so variants
never share an event loop or a GIL with the driver or with each other, and
/proc gives each one's CPU time and memory. Commands are JSON lines on stdin;
each gets one JSON line back on stdout. Logs go to stderr.

  {"op": "ready"}    wait until every partition is assigned, then pause consumption
  {"op": "pause"}    stop fetching (a backlog can be preloaded)
  {"op": "resume"}   fetch again
  {"op": "trace"}    (Chorus) start recording the hop trace (chorus.base.hoptrace)
  {"op": "hops"}     (Chorus) stop recording; the trace recorded since "trace"
  {"op": "stop"}     stop gracefully and exit

Configuration: BENCH_WORKER (JSON) for the raw loops; CHORUS_* for Chorus services.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Protocol

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from chorus.base import hoptrace
from chorus.base.loops import run_main
from chorus.kernel.kafka import make_consumer, make_producer
from chorus.runtime.runner import ServiceRunner, ServiceSettings


class Steerable(Protocol):
    consumer: AIOKafkaConsumer
    topics: list[str]

    async def stop(self) -> None: ...


class RawLoop:
    """The transport ceiling: consume -> (optional INSERT+COMMIT) -> produce -> commit offsets.

    Same client settings as every Chorus service (chorus.kernel.kafka): acks=all,
    idempotent producer, manual commit, read_committed. With a database, records
    of one poll run concurrently up to ``concurrency`` over a pool of ``pool_size``,
    the same limits a Chorus service has, so the baseline is not handicapped by
    doing its inserts one at a time.
    """

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.topics = [cfg["in_topic"]]
        self.out_topic: str = cfg["out_topic"]
        self.consumer = make_consumer(
            cfg["bootstrap"], cfg["in_topic"], group_id=cfg["group"], client_id="bench-raw"
        )
        self.producer = make_producer(cfg["bootstrap"], client_id="bench-raw")
        self.pool: asyncpg.Pool | None = None
        self.sem = asyncio.Semaphore(int(cfg.get("concurrency", 32)))
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        if self.cfg.get("database_url"):
            self.pool = await asyncpg.create_pool(
                self.cfg["database_url"], min_size=1, max_size=int(self.cfg.get("pool_size", 10))
            )
            async with self.pool.acquire() as conn:
                await conn.execute(
                    """CREATE SCHEMA IF NOT EXISTS bench_raw;
                       CREATE TABLE IF NOT EXISTS bench_raw.events (
                         event_id uuid PRIMARY KEY, workflow_id text NOT NULL,
                         body bytea NOT NULL, received_at timestamptz NOT NULL)"""
                )
        await self.producer.start()
        await self.consumer.start()
        self._task = asyncio.create_task(self._run())

    def _transform(self, value: bytes) -> tuple[dict[str, Any], bytes]:
        body = json.loads(value)
        p = body["payload"]
        out = {
            "event_type": "bench.raw_pong",
            "event_id": str(uuid.uuid4()),
            "causation_id": body["event_id"],
            "workflow_id": body["workflow_id"],
            "occurred_at": datetime.now(timezone.utc).isoformat(),
            "payload": {"seq": p["seq"], "sent_ns": p["sent_ns"], "pad": p["pad"]},
        }
        return body, json.dumps(out).encode()

    async def _one_with_db(self, record: Any) -> asyncio.Future[Any]:
        assert self.pool is not None
        async with self.sem:
            body, out = self._transform(record.value)
            async with self.pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO bench_raw.events (event_id, workflow_id, body, received_at)"
                    " VALUES ($1, $2, $3, $4)",
                    uuid.UUID(body["event_id"]),
                    body["workflow_id"],
                    record.value,
                    datetime.now(timezone.utc),
                )
            fut: asyncio.Future[Any] = await self.producer.send(self.out_topic, out, key=record.key)
            return fut

    async def _run(self) -> None:
        while not self._stopping:
            batches = await self.consumer.getmany(timeout_ms=100, max_records=500)
            if not batches:
                continue
            records = [r for rs in batches.values() for r in rs]
            if self.pool is None:
                futures = [
                    await self.producer.send(self.out_topic, self._transform(r.value)[1], key=r.key)
                    for r in records
                ]
            else:
                futures = await asyncio.gather(*(self._one_with_db(r) for r in records))
            await asyncio.gather(*futures)  # acks=all for every output before the commit
            await self.consumer.commit({tp: rs[-1].offset + 1 for tp, rs in batches.items()})

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self.consumer.stop()
        await self.producer.stop()
        if self.pool is not None:
            await self.pool.close()


class ChorusWorker:
    """A bench service on the unmodified runtime (ServiceRunner), as ``python -m`` would run it."""

    def __init__(self, service: str) -> None:
        from bench.services import SPECS

        self.runner = ServiceRunner(SPECS[service], ServiceSettings())

    async def start(self) -> None:
        await self.runner.start()
        assert self.runner.edge is not None
        self.consumer = self.runner.edge.consumer
        self.topics = self.runner.topics()

    async def stop(self) -> None:
        await self.runner.stop()


async def _wait_assigned(target: Steerable, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        wanted = 0
        for topic in target.topics:
            partitions = target.consumer.partitions_for_topic(topic)
            wanted += len(partitions) if partitions else 10**6
        if len(target.consumer.assignment()) >= wanted:
            return wanted
        await asyncio.sleep(0.05)
    raise TimeoutError(f"partitions of {target.topics} not all assigned after {timeout_s}s")


def _assigned(target: Steerable) -> list[TopicPartition]:
    return list(target.consumer.assignment())


async def serve(target: Steerable) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break  # the driver is gone
        cmd = json.loads(line)
        op = cmd["op"]
        reply: dict[str, Any] = {"ok": True, "op": op, "pid": os.getpid()}
        try:
            if op == "ready":
                reply["partitions"] = await _wait_assigned(target)
                target.consumer.pause(*_assigned(target))
            elif op == "pause":
                target.consumer.pause(*_assigned(target))
            elif op == "resume":
                target.consumer.resume(*_assigned(target))
            elif op == "trace":
                hoptrace.enable()
            elif op == "hops":
                reply["marks"], reply["links"] = hoptrace.drain()
                hoptrace.disable()
            elif op == "stop":
                pass
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as exc:
            reply = {"ok": False, "op": op, "error": repr(exc)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        if op == "stop":
            break


async def amain(kind: str) -> None:
    target: RawLoop | ChorusWorker
    if kind == "raw":
        target = RawLoop(json.loads(os.environ["BENCH_WORKER"]))
    else:
        target = ChorusWorker(kind.removeprefix("chorus-"))
    await target.start()
    loop = type(asyncio.get_running_loop())
    hello: dict[str, Any] = {"ok": True, "op": "started", "pid": os.getpid(), "loop": loop.__module__}
    if isinstance(target, ChorusWorker) and target.runner.http is not None:
        hello["http_port"] = target.runner.http.port  # /metrics: the runtime's own histograms
    sys.stdout.write(json.dumps(hello) + "\n")
    sys.stdout.flush()
    try:
        await serve(target)
    finally:
        await target.stop()


if __name__ == "__main__":
    import bench.events  # noqa: F401  (registers the bench event types)

    run_main(amain(sys.argv[1]))  # the loop every service runs on
