"""The named rate limiter is shared by replicas through PostgreSQL."""

from __future__ import annotations

import random

import asyncpg
import pytest

from chorus.base.clock import ManualClock
from chorus.outside.ratelimit import RateLimiter

pytestmark = pytest.mark.integration


async def test_replicas_share_one_bucket(database_url: str, unique: str) -> None:
    clock = ManualClock()
    pools = [await asyncpg.create_pool(database_url, min_size=1, max_size=2) for _ in range(2)]
    try:
        a, b = (
            RateLimiter(pool, f"llm-{unique}", rate_per_s=10, clock=clock, rng=random.Random(i))
            for i, pool in enumerate(pools)
        )
        await a.setup()
        await b.setup()
        # Two replicas asking 30 times each at one instant get the burst (10) between them.
        results = [await limiter.try_acquire() for _ in range(30) for limiter in (a, b)]
        assert sum(r.ok for r in results) == 10
        refused = [r for r in results if not r.ok]
        assert all(r.wait_s == pytest.approx(0.1) for r in refused)  # one token at 10/s

        clock.advance(0.5)  # half a second refills five tokens, for everyone together
        results = [await limiter.try_acquire() for _ in range(10) for limiter in (a, b)]
        assert sum(r.ok for r in results) == 5
    finally:
        for pool in pools:
            await pool.close()


async def test_acquire_waits_on_the_injected_clock(database_url: str, unique: str) -> None:
    clock = ManualClock()
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        limiter = RateLimiter(pool, f"api-{unique}", rate_per_s=2, burst=1, clock=clock)
        await limiter.setup()
        await limiter.acquire()
        import asyncio

        waiting = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0.2)
        assert not waiting.done()  # the clock has not moved: no token yet
        clock.advance(1.0)
        await asyncio.wait_for(waiting, timeout=5)
    finally:
        await pool.close()
