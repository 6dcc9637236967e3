"""The firing loop: claims due timers in batches and publishes them through the outbox.

Claiming, writing the target event to the outbox and marking the timer fired
happen in one transaction, so a timer fires exactly once even when the process
dies at any point. Replicas claim disjoint batches (FOR UPDATE SKIP LOCKED).
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import Histogram

from chorus.base.loops import forever
from chorus.kernel.outbox import stored_envelope_message
from chorus.kernel.service import RuntimeHandle
from chorus.platform.timer_service.adapters import repository
from chorus.platform.timer_service.domain import lateness_s, next_wake_in_s

log = logging.getLogger("chorus.platform.timer_service.firing")

LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 30, 300, 3600, 86400)


class TimerMetrics:
    def __init__(self, rt: RuntimeHandle) -> None:
        self.pending = rt.metrics.gauge("chorus_timers_pending", "Timers waiting to fire")
        self.fired = rt.metrics.counter("chorus_timers_fired", "Timers fired", ["purpose"])
        self.lateness = Histogram(
            "chorus_timer_lateness_seconds",
            "Fire time minus due time",
            buckets=LATENESS_BUCKETS,
            registry=rt.metrics.registry,
        )


async def fire_due_timers(rt: RuntimeHandle) -> None:
    metrics = TimerMetrics(rt)
    batch_size: int = rt.settings.fire_batch_size
    max_idle_s: float = rt.settings.max_idle_s
    last_gauge = -1.0
    loop = asyncio.get_running_loop()

    async def fire_round() -> float:
        nonlocal last_gauge
        fired = await fire_batch(rt, metrics, batch_size)
        if loop.time() - last_gauge > 2.0:
            async with rt.pool.acquire() as conn:
                metrics.pending.set(await repository.pending_count(conn))
            last_gauge = loop.time()
        if fired == batch_size:
            return 0  # more may be due right now
        async with rt.pool.acquire() as conn:
            upcoming = await repository.next_due(conn)
        return next_wake_in_s(rt.clock.now(), upcoming, max_idle_s)

    # The wait is on the injected clock (tests skip hours); a failed round retries in 0.5 s.
    await forever("timer firing", fire_round, every_s=max_idle_s, sleep=rt.clock.sleep, retry_s=0.5)


async def fire_batch(rt: RuntimeHandle, metrics: TimerMetrics, batch_size: int) -> int:
    now = rt.clock.now()
    async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
        due = await repository.claim_due(conn, now, batch_size)
        marks = []
        for timer in due:
            # Verbatim, with its scheduler's signature: the fired event is the scheduler's
            # statement (occurring when it was due), which this relay may not alter.
            late = lateness_s(timer.due_at, now)
            message = stored_envelope_message(timer.topic, timer.key, timer.envelope, timer.signature)
            tx.publish_messages([message])
            marks.append((timer.timer_id, late * 1000.0))
            metrics.lateness.observe(late)
            metrics.fired.labels(str(timer.envelope.get("event_type", "?"))).inc()
        if marks:
            await repository.mark_fired(conn, marks, now)
    return len(due)
