"""A named token bucket in PostgreSQL, shared by every replica of every service.

``llm`` at 10 requests/s means 10/s for the whole deployment, not per process.
Each acquire is one UPDATE that refills the bucket from the elapsed time (taken
from the injected clock) and takes a token if one is there. When none is, the
caller waits for the time a token needs plus a random share of it, so replicas
that were refused together do not come back together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import asyncpg

from chorus.base.clock import Clock
from chorus.base.errors import TransientError
from chorus.base.migrations import baseline, migrate

DDL = [
    "CREATE SCHEMA IF NOT EXISTS chorus",
    """CREATE TABLE IF NOT EXISTS chorus.rate_limits (
        name text PRIMARY KEY,
        rate_per_s double precision NOT NULL,
        burst double precision NOT NULL,
        tokens double precision NOT NULL,
        refilled_at timestamptz NOT NULL)""",
]


async def migrate_rate_limits(conn: asyncpg.Connection) -> None:
    """The shared buckets' table (schema chorus), made by the first limiter or the admin."""
    await migrate(conn, schema="chorus", component="ratelimit", migrations=baseline(DDL))


class RateLimitTimeout(Exception):
    """No token within the caller's deadline."""


class RateLimitedError(TransientError):
    """The dependency said too many (429), or this deployment's share of it (the shared rate
    limiter) had no room within the wait: retry later, or ask another (a model's fallback)."""


@dataclass(frozen=True)
class Acquired:
    ok: bool
    wait_s: float


class RateLimiter:
    def __init__(
        self,
        pool: asyncpg.Pool,
        name: str,
        *,
        rate_per_s: float,
        burst: float | None = None,
        clock: Clock,
        rng: random.Random | None = None,
    ) -> None:
        self.pool = pool
        self.name = name
        self.rate = rate_per_s
        self.burst = burst if burst is not None else rate_per_s
        self.clock = clock
        self.rng = rng or random.Random()

    async def setup(self) -> None:
        async with self.pool.acquire() as conn:
            await migrate_rate_limits(conn)
            await conn.execute(
                """INSERT INTO chorus.rate_limits (name, rate_per_s, burst, tokens, refilled_at)
                   VALUES ($1, $2, $3, $3, $4)
                   ON CONFLICT (name) DO UPDATE SET rate_per_s = $2, burst = $3""",
                self.name,
                self.rate,
                self.burst,
                self.clock.now(),
            )

    async def try_acquire(self, tokens: float = 1.0) -> Acquired:
        """Take ``tokens`` if the shared bucket has them; otherwise say how long to wait."""
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                """WITH cur AS (
                     SELECT name, rate_per_s, least(burst, tokens + rate_per_s *
                       greatest(0, extract(epoch FROM ($2 - refilled_at))::double precision)) AS avail
                     FROM chorus.rate_limits WHERE name = $1 FOR UPDATE)
                   UPDATE chorus.rate_limits r SET
                     tokens = CASE WHEN cur.avail >= $3 THEN cur.avail - $3 ELSE cur.avail END,
                     refilled_at = greatest(r.refilled_at, $2)
                   FROM cur WHERE r.name = cur.name
                   RETURNING cur.avail >= $3 AS granted, cur.avail AS avail, cur.rate_per_s AS rate""",
                self.name,
                self.clock.now(),
                tokens,
            )
        if row is None:
            raise KeyError(f"rate limiter {self.name!r} is not set up; call setup() first")
        if row["granted"]:
            return Acquired(True, 0.0)
        return Acquired(False, max(0.0, (tokens - float(row["avail"])) / float(row["rate"])))

    async def acquire(self, tokens: float = 1.0, *, timeout_s: float = 60.0) -> None:
        """Wait (on the injected clock) until the shared bucket grants ``tokens``."""
        waited = 0.0
        while True:
            result = await self.try_acquire(tokens)
            if result.ok:
                return
            pause = result.wait_s * (1.0 + self.rng.random())  # jitter: spread the herd
            if waited + pause > timeout_s:
                raise RateLimitTimeout(f"rate limiter {self.name!r}: no token within {timeout_s}s")
            await self.clock.sleep(pause)
            waited += pause


class KeyedRateLimits:
    """One shared bucket per key (``<prefix>:<key>``), made on a key's first use: e.g. every
    API key its own rate, across every replica of the service."""

    def __init__(
        self, pool: asyncpg.Pool, prefix: str, *, rate_per_s: float, burst: float, clock: Clock
    ) -> None:
        self.pool, self.prefix, self.rate, self.burst, self.clock = pool, prefix, rate_per_s, burst, clock
        self._buckets: dict[str, RateLimiter] = {}

    async def try_acquire(self, key: str) -> Acquired:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = RateLimiter(
                self.pool, f"{self.prefix}:{key}", rate_per_s=self.rate, burst=self.burst, clock=self.clock
            )
            await bucket.setup()
            self._buckets[key] = bucket
        return await bucket.try_acquire()
