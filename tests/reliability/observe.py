"""Reading a deployment's topics and its consumer groups' progress (never writing)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import ConsumerRecord, TopicPartition

from chorus.kernel.kafka import make_admin, make_consumer, stop_client
from chorus.platform.audit_projector.replay import partitions
from tests.reliability.deployment import Deployment, subscriptions


async def read_all(
    bootstrap: str, topics: Sequence[str], *, timeout_s: float = 60.0
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topics`` from the beginning up to the end offsets seen now."""
    tps = await partitions(bootstrap, list(topics))
    consumer = make_consumer(bootstrap, group_id=None)
    await consumer.start()
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        consumer.assign(tps)
        end = await consumer.end_offsets(tps)
        pending = {tp for tp in tps if end[tp] > 0}
        await consumer.seek_to_beginning(*tps)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while pending:
            if loop.time() > deadline:
                raise AssertionError(f"reading {len(tps)} partitions did not reach the end in {timeout_s}s")
            for tp, batch in (await consumer.getmany(timeout_ms=300)).items():
                records.extend(r for r in batch if r.offset < end[tp])
            for tp in list(pending):
                if await consumer.position(tp) >= end[tp]:
                    pending.discard(tp)
    finally:
        await stop_client(consumer)
    return records


async def group_lag(dep: Deployment) -> dict[str, int]:
    """Records each service's group has not committed yet, per group."""
    subs = subscriptions(dep.registry)
    every = sorted({t for topics in subs.values() for t in topics})
    tps = await partitions(dep.bootstrap, every)
    consumer = make_consumer(dep.bootstrap, group_id=None)
    await consumer.start()
    try:
        end: dict[TopicPartition, int] = await consumer.end_offsets(tps)
    finally:
        await stop_client(consumer)
    admin = make_admin(dep.bootstrap)
    await admin.start()
    lag: dict[str, int] = {}
    try:
        for service, topics in subs.items():
            mine = [tp for tp in tps if tp.topic in topics]
            committed = await admin.list_consumer_group_offsets(dep.group(service), partitions=mine)
            total = 0
            for tp in mine:
                meta = committed.get(tp)
                done = meta.offset if meta is not None and meta.offset >= 0 else 0
                total += max(0, end[tp] - done)
            lag[service] = total
    finally:
        await admin.close()
    return lag
