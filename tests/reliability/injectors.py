"""The faults, each recorded in the scenario's :class:`FaultLog` with when it healed.

A fault that cannot be injected as asked (an injection point the traffic never
reached, a replica that never got partitions) is recorded as a problem, so a scenario
that broke nothing cannot pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import os
import random
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from aiokafka.errors import KafkaError

from chorus.kernel.kafka import make_consumer, make_producer, stop_client
from chorus.platform.audit_projector.replay import partitions
from tests.reliability.deployment import DATABASE_PROXY, Deployment, FaultLog, Poison, subscriptions
from tests.reliability.observe import group_lag, read_all

log = logging.getLogger("reliability.injectors")

FAULT_LINE = "chorus fault injection: SIGKILL at {point}"


# -- SIGKILL at a named point -----------------------------------------------------------------


async def sigkill_at(
    dep: Deployment,
    faults: FaultLog,
    service: str,
    point: str,
    nth: int,
    *,
    feed: Callable[[], Awaitable[None]] | None = None,
    timeout_s: float = 120.0,
) -> None:
    """Restart ``service`` with ``CHORUS_FAULTS=<point>:<nth>``, wait until it kills itself
    there (traffic comes from the scenario's trickle, or ``feed``), then start it clean.

    The restart that arms the fault is graceful (SIGTERM), so the only crash is the named one.
    """
    await dep.terminate(service)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    proc = dep.proc(service)
    fault = None
    for _ in range(3):
        await dep.start_proc(service, {"CHORUS_FAULTS": f"{point}:{nth}"}, healthy=False)
        assert proc.popen is not None
        while proc.popen.poll() is None and loop.time() < deadline:
            if feed is not None:
                await feed()
            await asyncio.sleep(0.2)
        code = proc.popen.poll()
        fired = FAULT_LINE.format(point=point) in dep.log_since_start(service)
        if code is None or code == -signal.SIGKILL:
            break
        # It died before reaching the point (a crash while starting): arm it again.
        dep.startup_crashes.append(f"{service} (armed): {dep.last_error(service)}")
    if code == -signal.SIGKILL and fired:
        fault = faults.add("sigkill", service, f"{point}:{nth}")
    elif code is None:
        faults.problems.append(f"{service}: {point}:{nth} was not reached within {timeout_s:.0f}s")
        dep.stack.kill(service)
    else:
        faults.problems.append(f"{service} armed with {point}:{nth} exited {code} without firing it")
    dep.stopped_on_purpose.add(service)
    await dep.start_proc(service)
    if fault is not None:
        fault.healed_at = time.monotonic()


# -- Kafka ------------------------------------------------------------------------------------


async def restart_single_broker(dep: Deployment, faults: FaultLog, *, hard: bool, down_s: float) -> None:
    """The whole (one-broker) cluster goes away under load and comes back."""
    kafka = dep.config.kafka
    fault = faults.add("broker-restart", kafka.label, "SIGKILL" if hard else "SIGTERM (controlled shutdown)")
    if hard:
        kafka.kill_node(1)
        await kafka.wait_node_gone(1)
    else:
        await kafka.stop()
    await asyncio.sleep(down_s)
    await kafka.start()
    fault.healed_at = time.monotonic()


async def kill_broker_node(dep: Deployment, faults: FaultLog, *, down_s: float) -> int:
    """SIGKILL the broker leading most of the deployment's partitions; restart it later."""
    kafka = dep.config.kafka
    topics = [p for spec in dep.registry.topics.values() for p in spec.physical_topics()]
    node = await kafka.busiest_node(topics)
    fault = faults.add("broker-kill", f"{kafka.label} node {node}", f"SIGKILL, down {down_s:.0f}s")
    kafka.kill_node(node)
    await kafka.wait_node_gone(node)
    await asyncio.sleep(down_s)
    await kafka.start()  # starts the missing node only
    fault.healed_at = time.monotonic()
    return node


# -- PostgreSQL --------------------------------------------------------------------------------


async def restart_postgres(dep: Deployment, faults: FaultLog) -> None:
    fault = faults.add("postgres-restart", "postgres", "pg_ctl restart -m fast")
    await dep.config.postgres.restart()
    fault.healed_at = time.monotonic()


async def postgres_outage(dep: Deployment, faults: FaultLog, down_s: float) -> None:
    fault = faults.add("postgres-outage", "postgres", f"fast shutdown, down {down_s:.0f}s")
    await dep.config.postgres.stop()
    await asyncio.sleep(down_s)
    await dep.config.postgres.start()
    fault.healed_at = time.monotonic()


# -- duplicate delivery ---------------------------------------------------------------------------


def all_topics(dep: Deployment) -> list[str]:
    return sorted(p for spec in dep.registry.topics.values() for p in spec.physical_topics())


async def reinject(dep: Deployment, faults: FaultLog, workflow_ids: set[str], rng: random.Random) -> int:
    """Publish every record of these workflows again, 2 to 5 more times each, same bytes,
    key and headers: what a producer retry storm or a replayed topic delivers. Returns
    the number of copies."""
    records = [
        r for r in await read_all(dep.bootstrap, all_topics(dep)) if (r.key or b"").decode() in workflow_ids
    ]
    rng.shuffle(records)  # copies arrive out of their original order, too
    producer = make_producer(dep.bootstrap, client_id="reliability-reinject")
    await producer.start()
    copies = 0
    try:
        for record in records:
            for _ in range(rng.randint(2, 5)):
                await producer.send(record.topic, record.value, key=record.key, headers=list(record.headers))
                copies += 1
        await producer.flush()
    finally:
        await stop_client(producer)
    fault = faults.add("duplicate-reinjected", "topics", f"{len(records)} records x2-5", count=copies)
    fault.healed_at = time.monotonic()
    return copies


async def reset_group_to_earliest(dep: Deployment, group: str, topics: Sequence[str]) -> int:
    """Commit the beginning of every partition for ``group`` (which must have no members);
    returns how many records the group will read again."""
    tps = await partitions(dep.bootstrap, list(topics))
    consumer = make_consumer(dep.bootstrap, group_id=group, client_id="reliability-reset")
    await consumer.start()
    try:
        consumer.assign(tps)
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60.0
        while True:
            try:
                # Committing as a non-member works once the group is empty: the stopped
                # service left it (graceful stop), nothing else is in it.
                await consumer.commit({tp: begin[tp] for tp in tps})
                break
            except KafkaError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(1.0)
        return sum(end[tp] - begin[tp] for tp in tps)
    finally:
        await stop_client(consumer)


async def wait_caught_up(dep: Deployment, service: str, *, timeout_s: float) -> bool:
    """True once ``service``'s group has consumed every record of its topics."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if (await group_lag(dep)).get(service, 1) == 0:
            return True
        await asyncio.sleep(1.0)
    return False


async def rewind_services(dep: Deployment, faults: FaultLog, services: Sequence[str]) -> None:
    """Stop the services, rewind their consumer groups to the beginning, start them: every
    record they ever handled is delivered again (the inbox must drop all of it)."""
    subscribed = subscriptions(dep.registry, tuple(services))
    started = time.monotonic()
    try:
        await asyncio.gather(*(dep.terminate(s) for s in services))
        replays = await asyncio.gather(
            *(reset_group_to_earliest(dep, dep.group(s), sorted(subscribed[s])) for s in services)
        )
    finally:
        await asyncio.gather(*(dep.start_proc(s) for s in services))
    for service, records in zip(services, replays, strict=True):
        entry = faults.add("offsets-rewound", service, f"back to the beginning: {records} records again")
        entry.started_at = started
        entry.healed_at = time.monotonic()


# -- poison ----------------------------------------------------------------------------------------


POISON_KINDS = ("not-json", "oversize", "schema-invalid", "unknown-version")


def poison_value(kind: str, example: dict[str, Any], rng: random.Random, oversize_bytes: int) -> bytes:
    """The bytes of one poison record, built from a real example envelope of the topic."""
    if kind == "not-json":
        return b"\xff\xfe not json " + rng.randbytes(32) + b"\x00"
    if kind == "near-limit":
        # Not JSON either, but big: under the broker's 1 MB message limit, and under the
        # services' own 1 MiB default; base64 in a dead letter makes it a third larger.
        return b"\xff\xfe not json " + rng.randbytes(900_000)
    body = copy.deepcopy(example)
    body["event_id"] = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    if kind == "oversize":
        # Larger than the services accept, which refuse it before parsing. The dead-letter
        # consumers accept larger records (a dead letter is bigger than what it wraps), so
        # for them the payload is also invalid: no consumer may take it for an event.
        body["payload"] = {"padding": "x" * oversize_bytes}
    elif kind == "schema-invalid":
        body["payload"] = {"unexpected": True}  # every required payload field missing
    elif kind == "unknown-version":
        body["schema_version"] = 99
    else:
        raise ValueError(kind)
    return json.dumps(body).encode()


async def publish_poison(
    dep: Deployment,
    faults: FaultLog,
    rng: random.Random,
    *,
    topics: Sequence[str],
    keys: Sequence[str],
    kinds: Sequence[str] = POISON_KINDS,
    oversize_bytes: int | None = None,
) -> list[Poison]:
    """One record of each kind into each topic, keyed like live workflows (so it lands
    in the same partitions, between their events). Recorded on the deployment: the
    dead-letter store must end up holding exactly these bytes."""
    limit = dep.config.max_event_bytes or 1_048_576
    size = oversize_bytes if oversize_bytes is not None else limit + 4096
    producer = make_producer(
        dep.bootstrap, client_id="reliability-poison", max_request_size=2 * size + 65_536
    )
    await producer.start()
    published: list[Poison] = []
    try:
        for topic in topics:
            spec = dep.registry.topic_of_physical(topic)
            assert spec is not None, topic
            example = dep.registry.examples[(spec.events[0].type, spec.events[0].versions[0])][0].body
            for kind in kinds:
                value = poison_value(kind, example, rng, size)
                key = rng.choice(keys).encode() if keys else None
                meta = await (await producer.send(topic, value, key=key))
                published.append(Poison(kind, topic, meta.partition, meta.offset, value))
    finally:
        await stop_client(producer)
    dep.poison.extend(published)
    fault = faults.add(
        "poison", ",".join(sorted(set(kinds))), f"{len(published)} records", count=len(published)
    )
    fault.healed_at = time.monotonic()
    return published


# -- membership: scaling and a zombie ---------------------------------------------------------------


async def scale(dep: Deployment, faults: FaultLog, service: str, replicas: int) -> None:
    """Bring ``service`` to ``replicas`` processes (extra ones join its consumer group;
    removed ones leave gracefully). Each membership change is a rebalance."""
    current = 1 + len(dep.replicas.get(service, []))
    if replicas > current:
        names = await asyncio.gather(*(dep.add_replica(service) for _ in range(replicas - current)))
        for name in names:
            faults.add("rebalance", service, f"{name} joined").healed_at = time.monotonic()
    for name in list(reversed(dep.replicas.get(service, [])))[: max(0, current - replicas)]:
        entry = faults.add("rebalance", service, f"{name} left")
        code = await dep.remove_replica(name)
        if code != 0:
            faults.problems.append(f"{name} did not shut down cleanly when scaled down (exit {code})")
        entry.healed_at = time.monotonic()


async def assigned(dep: Deployment, name: str) -> int:
    try:
        return int((await dep.health(name)).get("assigned_partitions", 0))
    except Exception:
        return -1


async def zombie(dep: Deployment, faults: FaultLog, service: str, *, paused_s: float) -> None:
    """A replica that stops responding (SIGSTOP) while holding partitions, its database
    connections and possibly the relay's lock; the group moves its partitions to the
    other replica; then it wakes up (SIGCONT) believing it still owns them."""
    standby = await dep.add_replica(service)
    faults.add("rebalance", service, f"{standby} joined").healed_at = time.monotonic()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60.0
    while loop.time() < deadline:
        if await assigned(dep, service) > 0 and await assigned(dep, standby) > 0:
            break
        await asyncio.sleep(0.5)
    before = await assigned(dep, service)
    if before <= 0:
        faults.problems.append(f"{service} had no partitions before the pause; the zombie would hold nothing")
    # Pause it in the middle of handling something, so that it wakes up mid-handler.
    in_flight = 0
    deadline = loop.time() + 20.0
    while loop.time() < deadline and in_flight <= 0:
        try:
            in_flight = int((await dep.health(service)).get("in_flight", 0))
        except Exception:
            in_flight = 0
        if in_flight <= 0:
            await asyncio.sleep(0.05)
    proc = dep.proc(service)
    assert proc.popen is not None
    fault = faults.add(
        "zombie",
        service,
        f"SIGSTOP holding {before} partitions, {in_flight} record(s) in flight, {paused_s:.0f}s",
    )
    os.kill(proc.popen.pid, signal.SIGSTOP)
    try:
        deadline = loop.time() + paused_s
        moved = False
        while loop.time() < deadline:
            moved = moved or (await assigned(dep, standby)) >= total_partitions(dep, service)
            await asyncio.sleep(0.5)
        if not moved:
            faults.problems.append(f"{service}'s partitions never moved to {standby} while it was paused")
    finally:
        os.kill(proc.popen.pid, signal.SIGCONT)
    fault.healed_at = time.monotonic()
    # The woken zombie finishes what it had in flight, fails its commits, rejoins.
    await asyncio.sleep(5.0)
    entry = faults.add("rebalance", service, f"{standby} left")
    await dep.remove_replica(standby)
    entry.healed_at = time.monotonic()


def total_partitions(dep: Deployment, service: str) -> int:
    """Partitions of every topic the service's group reads."""
    count = 0
    for topic in subscriptions(dep.registry, (service,))[service]:
        spec = dep.registry.topic_of_physical(topic)
        assert spec is not None
        count += spec.partitions
    return count


async def kill(dep: Deployment, faults: FaultLog, service: str) -> None:
    """SIGKILL (a crash at no particular point); the caller restarts it."""
    faults.add("sigkill", service, "SIGKILL at an arbitrary point")
    dep.stopped_on_purpose.add(service)
    dep.stack.kill(service)


# -- network faults (tests/reliability/netlab.py) ----------------------------------------------

STOP_LINE = "chorus fault injection: SIGSTOP at {point}"


async def stopped_at(
    dep: Deployment,
    faults: FaultLog,
    service: str,
    point: str,
    nth: int = 1,
    *,
    feed: Callable[[], Awaitable[None]] | None = None,
    timeout_s: float = 120.0,
) -> int | None:
    """Restart ``service`` with ``CHORUS_FAULTS=<point>:<nth>:stop`` and wait until it stops
    itself there (SIGSTOP, frozen at that exact place); returns its pid, or None (a problem
    recorded) when traffic never took it there."""
    await dep.terminate(service)
    # Not waited healthy: it may reach the point before its health endpoint first answers.
    await dep.start_proc(service, {"CHORUS_FAULTS": f"{point}:{nth}:stop"}, healthy=False)
    proc = dep.proc(service)
    assert proc.popen is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    line = STOP_LINE.format(point=point)
    while loop.time() < deadline and proc.running:
        if line in dep.log_since_start(service):
            return proc.popen.pid
        if feed is not None:
            await feed()
        await asyncio.sleep(0.1)
    if proc.running:
        faults.problems.append(f"{service}: {point}:{nth} was not reached within {timeout_s:.0f}s")
    else:
        faults.problems.append(f"{service} armed with {point}:{nth}:stop exited: {dep.last_error(service)}")
    return None


async def partition_at(
    dep: Deployment,
    faults: FaultLog,
    service: str,
    point: str,
    target: str,
    *,
    hold_s: float,
    around: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
    feed: Callable[[], Awaitable[None]] | None = None,
) -> bool:
    """Freeze ``service`` at ``point``, cut its node off from ``target`` ("database" or
    "kafka"), let it go on (SIGCONT) into the partition for ``hold_s``, then heal.

    The process never stops running: it finds out as a real one would, through calls that
    hang and sessions that time out. ``around`` is entered once the partition is in place
    and left before it heals (a scenario's check that it bit, or a negative control's
    sabotage); ``feed`` brings traffic to the point. Returns whether the fault was injected."""
    node = dep.node(service)
    pid = await stopped_at(dep, faults, service, point, feed=feed)
    if pid is None:
        return False
    ports = dep.kafka_ports() if target == "kafka" else [dep.database_port()]
    await node.partition(ports, f"{target} ({', '.join(map(str, ports))})")
    fault = faults.add("partition", service, f"from {target} at {point}, {hold_s:.0f}s")
    os.kill(pid, signal.SIGCONT)
    try:
        async with around() if around is not None else contextlib.nullcontext():
            await asyncio.sleep(hold_s)
    finally:
        await node.heal()
    fault.healed_at = time.monotonic()
    if not dep.proc(service).running:
        faults.problems.append(f"{service} exited while partitioned from {target}: {dep.last_error(service)}")
        await dep.start_proc(service)
    return True


async def database_latency(
    dep: Deployment, faults: FaultLog, *, ms: int, for_s: float, applied: bool = True
) -> float:
    """``ms`` more on every answer the database sends any service, for ``for_s`` (toxiproxy
    on the services' path to it). Returns the round trip a client on that path measured in
    the middle of it (``applied`` False measures without the toxic: the negative control)."""
    lab = dep.lab
    assert lab is not None and lab.toxiproxy is not None, f"{dep.config.name} has no database proxy"
    fault = faults.add("latency", "database", f"+{ms} ms on every answer, {for_s:.0f}s")
    if applied:
        await lab.toxiproxy.latency(DATABASE_PROXY, ms, direction="downstream")
    try:
        await asyncio.sleep(for_s / 2)
        measured = await _round_trip_ms(dep)
        await asyncio.sleep(for_s / 2)
    finally:
        await lab.toxiproxy.clear(DATABASE_PROXY)
    fault.healed_at = time.monotonic()
    return measured


async def _round_trip_ms(dep: Deployment) -> float:
    """One query's round trip on the services' path to the database (the proxy)."""
    parts = urlsplit(dep.database_url)
    url = parts._replace(netloc=f"{parts.netloc.rsplit(':', 1)[0]}:{dep.database_port()}").geturl()
    conn = await asyncpg.connect(url, timeout=30)
    try:
        started = time.perf_counter()
        await conn.fetchval("SELECT 1")
        return (time.perf_counter() - started) * 1000
    finally:
        await conn.close()


async def cut_broker_outbound(
    dep: Deployment, faults: FaultLog, *, hold_s: float, applied: bool = True
) -> tuple[int, int, int]:
    """An asymmetric partition: the broker leading most partitions can no longer open or use
    connections of its own (to the controller quorum, to the leaders it follows), while
    clients and the other brokers still reach it. Returns (node, partitions it led before,
    partitions it leads at the end of the cut); ``applied`` False measures without the cut
    (the negative control)."""
    kafka = dep.config.kafka
    topics = all_topics(dep)
    node = await kafka.busiest_node(topics)
    before = (await kafka.leaders(topics)).get(node, 0)
    fault = faults.add("partition", f"{kafka.label} node {node}", f"its own connections cut, {hold_s:.0f}s")
    lab_node = dep.broker_node(node)
    if applied:
        await lab_node.cut_outbound("the other brokers")
    try:
        await asyncio.sleep(hold_s)
        during = (await kafka.leaders(topics)).get(node, 0)
    finally:
        await lab_node.heal()
    fault.healed_at = time.monotonic()
    return node, before, during
