"""The firing loop: claims due timers in batches and publishes them through the outbox.

Claiming, writing the target event to the outbox and marking the timer fired
happen in one transaction, so a timer fires exactly once even when the process
dies at any point. Replicas claim disjoint batches (FOR UPDATE SKIP LOCKED).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

from prometheus_client import Counter, Gauge, Histogram

from chorus.service import RuntimeHandle
from chorus.store import OutboxMessage
from timer_service.adapters import repository
from timer_service.domain import lateness_s, next_wake_in_s, stamp_fired

log = logging.getLogger("timer_service.firing")

LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 30, 300, 3600, 86400)


class TimerMetrics:
    def __init__(self, rt: RuntimeHandle) -> None:
        registry = rt.metrics.registry
        self.pending = Gauge("chorus_timers_pending", "Timers waiting to fire", registry=registry)
        self.fired = Counter("chorus_timers_fired", "Timers fired", ["purpose"], registry=registry)
        self.lateness = Histogram(
            "chorus_timer_lateness_seconds",
            "Fire time minus due time",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )


async def fire_due_timers(rt: RuntimeHandle) -> None:
    metrics = TimerMetrics(rt)
    batch_size: int = rt.settings.fire_batch_size
    max_idle_s: float = rt.settings.max_idle_s
    last_gauge = -1.0
    loop = asyncio.get_running_loop()
    while True:
        try:
            fired = await fire_batch(rt, metrics, batch_size)
            if loop.time() - last_gauge > 2.0:
                async with rt.pool.acquire() as conn:
                    metrics.pending.set(await repository.pending_count(conn))
                last_gauge = loop.time()
            if fired == batch_size:
                continue  # more may be due right now
            async with rt.pool.acquire() as conn:
                upcoming = await repository.next_due(conn)
            await rt.clock.sleep(next_wake_in_s(rt.clock.now(), upcoming, max_idle_s))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # database restart: wait and go on; nothing was half-done
            log.warning("firing loop interrupted (%r); retrying", exc)
            await asyncio.sleep(0.5)


async def fire_batch(rt: RuntimeHandle, metrics: TimerMetrics, batch_size: int) -> int:
    now = rt.clock.now()
    async with rt.pool.acquire() as conn, conn.transaction():
        due = await repository.claim_due(conn, now, batch_size)
        if not due:
            return 0
        messages = []
        marks = []
        for timer in due:
            envelope = stamp_fired(timer.envelope, now)
            late = lateness_s(timer.due_at, now)
            messages.append(
                OutboxMessage(
                    topic=timer.topic,
                    key=timer.key.encode(),
                    value=json.dumps(envelope).encode(),
                    headers=[
                        ("traceparent", str(envelope.get("traceparent", "")).encode()),
                        ("event_type", str(envelope.get("event_type", "")).encode()),
                    ],
                    event_id=_uuid(envelope.get("event_id")),
                    workflow_id=str(envelope.get("workflow_id", timer.key)),
                )
            )
            marks.append((timer.timer_id, late * 1000.0))
            metrics.lateness.observe(late)
            metrics.fired.labels(str(envelope.get("event_type", "?"))).inc()
        await rt.store.add_outbox(conn, messages)
        await repository.mark_fired(conn, marks, now)
    rt.wake_relay()
    return len(due)


def _uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None
