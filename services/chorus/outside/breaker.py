"""A circuit breaker per external dependency, shared by every replica in PostgreSQL.

closed     calls go through; each call's result counts in a rolling window. When at
           least ``min_calls`` were made in the window and ``failure_ratio`` of them
           failed, the breaker opens.
open       calls fail fast (:class:`BreakerOpenError`, a TransientError whose retry
           delay is the time left until the breaker may close), so a failing provider is
           not hammered by every waiting workflow's retries.
half_open  after ``open_s``, up to ``probes`` calls go through; a success closes the
           breaker, a failure (or a call cut off) opens it again for another ``open_s``.
           The others are told to come back after ``open_s``; probes that never report
           (their replica died) are given up after ``open_s``, so it is never stuck.

Only the dependency's own failures count (timeouts, connection errors, 429, 5xx: a
:class:`TransientError`); a 4xx answer is the dependency working and counts as a success.
Each decision is one statement on the row (``FOR UPDATE``), on the injected clock, like
the rate limiter beside it (``chorus.rate_limits``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import asyncpg
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel, ConfigDict, Field

from chorus.base.clock import Clock
from chorus.base.compat import StrEnum
from chorus.base.errors import TransientError
from chorus.base.migrations import baseline, migrate

log = logging.getLogger("chorus.outside.breaker")

DDL = [
    "CREATE SCHEMA IF NOT EXISTS chorus",
    """CREATE TABLE IF NOT EXISTS chorus.circuit_breakers (
        name text PRIMARY KEY,
        state text NOT NULL,
        window_started_at timestamptz NOT NULL,
        calls int NOT NULL,
        failures int NOT NULL,
        probes int NOT NULL,
        reopen_at timestamptz,
        changed_at timestamptz NOT NULL)""",
]


async def migrate_breakers(conn: asyncpg.Connection) -> None:
    """The shared breakers' table (schema chorus), made by the first breaker or the admin."""
    await migrate(conn, schema="chorus", component="breakers", migrations=baseline(DDL))


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


STATE_VALUE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}
"""The metric's value per state (chorus_breaker_state)."""


class BreakerOpenError(TransientError):
    """The dependency's breaker is open: not called. Retried (durably) when it may close."""


class BreakerPolicy(BaseModel):
    """When a dependency's breaker opens and for how long (a setting: JSON in CHORUS_*)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    failure_ratio: float = Field(default=0.5, gt=0, le=1)
    min_calls: int = Field(default=5, ge=1)
    """Calls in the window before the ratio counts (a single failure opens nothing)."""
    window_s: float = Field(default=60.0, gt=0)
    open_s: float = Field(default=30.0, gt=0)
    """How long it stays open before a probe may go through."""
    probes: int = Field(default=1, ge=1)


class CircuitBreaker:
    """``async with breaker.call(): <one call to the dependency>``."""

    def __init__(
        self, pool: asyncpg.Pool, name: str, *, clock: Clock, policy: BreakerPolicy | None = None
    ) -> None:
        self.pool = pool
        self.name = name
        self.clock = clock
        self.policy = policy or BreakerPolicy()
        self.state = BreakerState.CLOSED
        """As this process last saw it (for /metrics and chorus status)."""
        self.rejections = 0
        """Calls this process did not make because the breaker was open."""
        self.rng = random.Random()
        self._recording: set[asyncio.Task[None]] = set()
        _KNOWN[name] = self

    async def setup(self, *, migrate: bool = True) -> None:
        """Its row (and, unless ``migrate`` is False, the shared table first)."""
        async with self.pool.acquire() as conn:
            if migrate:
                await migrate_breakers(conn)
            await conn.execute(
                """INSERT INTO chorus.circuit_breakers
                     (name, state, window_started_at, calls, failures, probes, changed_at)
                   VALUES ($1, 'closed', $2, 0, 0, 0, $2) ON CONFLICT (name) DO NOTHING""",
                self.name,
                self.clock.now(),
            )

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        """Let one call through, or raise BreakerOpenError; record how the call ended."""
        await self._admit()
        try:
            yield
        except TransientError as exc:
            if not isinstance(exc, BreakerOpenError):
                await self._record(failed=True)
            raise
        except asyncio.CancelledError:
            # A call cut off (its task timeout, a shutdown) did not answer in time: a failure,
            # recorded beside the cancelled task (which may not await any more).
            task = asyncio.ensure_future(self._record(failed=True))
            self._recording.add(task)
            task.add_done_callback(self._recording.discard)
            raise
        except BaseException:
            await self._record(failed=False)  # an answer (a 4xx), or our own bug: not the dependency's
            raise
        await self._record(failed=False)

    async def _admit(self) -> None:
        p = self.policy
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                """WITH cur AS (SELECT * FROM chorus.circuit_breakers WHERE name = $1 FOR UPDATE),
                   next AS (
                     SELECT CASE
                         WHEN cur.state = 'open' AND $2 >= cur.reopen_at THEN 'half_open'
                         ELSE cur.state END AS state,
                       -- Probes start afresh when it half-opens, and when the probes in flight
                       -- have had open_s without a word (their replica died): never stuck.
                       CASE
                         WHEN cur.state = 'open' AND $2 >= cur.reopen_at THEN 0
                         WHEN cur.state = 'half_open' AND $2 >= cur.changed_at + make_interval(secs => $4)
                           THEN 0
                         ELSE cur.probes END AS probes,
                       cur.state = 'half_open' AND $2 >= cur.changed_at + make_interval(secs => $4) AS lost
                     FROM cur),
                   decided AS (
                     SELECT next.state, next.probes, next.lost,
                       (next.state = 'closed' OR (next.state = 'half_open' AND next.probes < $3)) AS allowed
                     FROM next)
                   UPDATE chorus.circuit_breakers b SET
                     state = decided.state,
                     probes = decided.probes + CASE WHEN decided.allowed AND decided.state = 'half_open'
                                                    THEN 1 ELSE 0 END,
                     changed_at = CASE WHEN decided.state <> b.state OR decided.lost THEN $2
                                       ELSE b.changed_at END
                   FROM decided WHERE b.name = $1
                   RETURNING decided.allowed, decided.state, b.reopen_at""",
                self.name,
                self.clock.now(),
                p.probes,
                p.open_s,
            )
        if row is None:
            raise KeyError(f"circuit breaker {self.name!r} is not set up; call setup() first")
        self._saw(BreakerState(row["state"]))
        if row["allowed"]:
            return
        reopen_at = row["reopen_at"]
        wait = p.open_s  # half-open: a probe is out and decides; ask again when it must have
        if row["state"] == BreakerState.OPEN and reopen_at is not None:
            wait = max(0.0, (reopen_at - self.clock.now()).total_seconds())
        # Spread the herd: the workflows that waited must not all come back at one instant.
        wait = wait * (1.0 + 0.2 * self.rng.random())
        self.rejections += 1
        raise BreakerOpenError(
            f"{self.name} is failing: its circuit breaker is {row['state']}, calls resume in {wait:.1f}s",
            retry_after_s=max(wait, 0.05),
        )

    async def _record(self, *, failed: bool) -> None:
        p = self.policy
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                """WITH cur AS (
                     SELECT *, ($2 - window_started_at) >= make_interval(secs => $4) AS expired
                     FROM chorus.circuit_breakers WHERE name = $1 FOR UPDATE),
                   counted AS (
                     SELECT cur.state,
                       CASE WHEN cur.expired THEN $2 ELSE cur.window_started_at END AS started,
                       CASE WHEN cur.expired THEN 1 ELSE cur.calls + 1 END AS calls,
                       CASE WHEN cur.expired THEN 0 ELSE cur.failures END
                         + CASE WHEN $3 THEN 1 ELSE 0 END AS failures
                     FROM cur),
                   next AS (
                     SELECT counted.*,
                       CASE
                         WHEN counted.state = 'half_open' AND $3 THEN 'open'
                         WHEN counted.state = 'half_open' THEN 'closed'
                         WHEN counted.state = 'closed' AND counted.calls >= $5
                              AND counted.failures >= $6::float8 * counted.calls THEN 'open'
                         ELSE counted.state END AS new_state
                     FROM counted)
                   UPDATE chorus.circuit_breakers b SET
                     state = next.new_state,
                     window_started_at = CASE WHEN next.new_state <> next.state THEN $2 ELSE next.started END,
                     calls = CASE WHEN next.new_state <> next.state THEN 0 ELSE next.calls END,
                     failures = CASE WHEN next.new_state <> next.state THEN 0 ELSE next.failures END,
                     probes = CASE WHEN next.new_state = 'half_open' THEN b.probes ELSE 0 END,
                     reopen_at = CASE WHEN next.new_state = 'open' AND next.state <> 'open'
                                      THEN $2 + make_interval(secs => $7) ELSE b.reopen_at END,
                     changed_at = CASE WHEN next.new_state <> next.state THEN $2 ELSE b.changed_at END
                   FROM next WHERE b.name = $1
                   RETURNING next.state AS was, next.new_state AS state""",
                self.name,
                self.clock.now(),
                failed,
                p.window_s,
                p.min_calls,
                p.failure_ratio,
                p.open_s,
            )
        if row is None:
            return
        if row["was"] != row["state"]:
            log.warning("circuit breaker %s: %s -> %s", self.name, row["was"], row["state"])
        self._saw(BreakerState(row["state"]))

    def _saw(self, state: BreakerState) -> None:
        self.state = state


_KNOWN: dict[str, CircuitBreaker] = {}


def known() -> list[CircuitBreaker]:
    """The breakers this process uses (for /health, /metrics and ``chorus status``)."""
    return [_KNOWN[name] for name in sorted(_KNOWN)]


class BreakerCollector(Collector):
    """The circuit breakers this process uses, read when Prometheus scrapes, one series per
    dependency. A dependency of many endpoints has a breaker per endpoint (``Dependency.keyed``:
    ``webhooks:<host>``, a host a submitter chose): labelled by endpoint, the series would be
    as many as the hosts anyone names. The endpoint's part of the name is dropped: a
    dependency's state is its worst endpoint's, its rejections their sum, and how many of its
    endpoints are open is a series of its own (/health and ``chorus status`` name them)."""

    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "chorus_breaker_state",
            "Circuit breaker of each dependency (its worst endpoint's) as this process last saw it: "
            "0 closed, 1 half-open, 2 open",
            labels=["dependency"],
        )
        rejected = CounterMetricFamily(
            "chorus_breaker_rejections",
            "Calls not made because the dependency's circuit breaker was open",
            labels=["dependency"],
        )
        open_endpoints = GaugeMetricFamily(
            "chorus_breaker_open_endpoints",
            "Endpoints of each dependency whose circuit breaker is open",
            labels=["dependency"],
        )
        families: dict[str, list[CircuitBreaker]] = {}
        for one in known():
            families.setdefault(one.name.partition(":")[0], []).append(one)
        for dependency, breakers in sorted(families.items()):
            state.add_metric([dependency], max(STATE_VALUE[b.state] for b in breakers))
            rejected.add_metric([dependency], sum(b.rejections for b in breakers))
            open_endpoints.add_metric([dependency], sum(b.state is BreakerState.OPEN for b in breakers))
        yield state
        yield rejected
        yield open_endpoints
