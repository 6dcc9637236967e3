"""External dependencies as first-class: each declares a shared rate limit and a circuit breaker.

A service's bootstrap declares what it calls (the payment provider, the sources, the
LLM, webhook receivers) as :class:`Dependency` values, and its adapters make every
call inside ``async with guard.call():``. The rate limit (``chorus.outside.ratelimit``) and the
breaker (``chorus.outside.breaker``) live in PostgreSQL, so they hold for every replica at once:
a failing provider gets a bounded number of calls however many workflows wait on it.

``guard.call()`` raises a :class:`TransientError` without calling when the breaker is
open (retried when it may close) or when no rate token comes within ``max_wait_s``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from chorus.base.clock import Clock, clock_from_setting
from chorus.base.db import create_pool
from chorus.outside.breaker import BreakerPolicy, CircuitBreaker
from chorus.outside.ratelimit import RateLimitedError, RateLimiter, RateLimitTimeout


class Dependency(BaseModel):
    """One external system: its name (the breaker's and the bucket's), its rate, its breaker."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    rate_per_s: float | None = Field(default=None, gt=0)
    """Calls per second for the whole deployment; None: not limited here."""
    burst: float | None = Field(default=None, gt=0)
    max_wait_s: float = Field(default=30.0, ge=0)
    """How long a call waits for a rate token before it fails (transient)."""
    breaker: BreakerPolicy = BreakerPolicy()

    def keyed(self, key: str) -> Dependency:
        """The same policy for one of many endpoints (a source's host, a webhook receiver):
        ``name:key``. Its metrics stay under ``name`` (a key may be anyone's choice)."""
        return self.model_copy(update={"name": f"{self.name}:{key}"[:200]})


class Guarding(Protocol):
    """What an adapter holds for one dependency (a :class:`Guard`, or the testing kit's none)."""

    def call(self) -> AbstractAsyncContextManager[None]: ...


class Guards(Protocol):
    """What an adapter of many endpoints holds (:class:`Dependencies`, or the testing kit's)."""

    async def guard(self, dependency: Dependency) -> Guarding: ...


class Guard:
    """Calls to one dependency: rate-limited, then through its breaker."""

    def __init__(self, dependency: Dependency, breaker: CircuitBreaker, limiter: RateLimiter | None) -> None:
        self.dependency = dependency
        self.breaker = breaker
        self.limiter = limiter

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        """Around exactly one call to the dependency (see the module's docstring)."""
        if self.limiter is not None:
            try:
                await self.limiter.acquire(timeout_s=self.dependency.max_wait_s)
            except RateLimitTimeout as exc:
                raise RateLimitedError(f"{self.dependency.name}: {exc}") from exc
        async with self.breaker.call():
            yield


class Dependencies:
    """Makes the guards of a service's dependencies (their rows are set up on first use)."""

    def __init__(self, pool: asyncpg.Pool, clock: Clock) -> None:
        self.pool = pool
        self.clock = clock
        self._guards: dict[str, Guard] = {}
        self._migrated = False
        """The shared breakers table is checked once, not for every new host."""

    async def guard(self, dependency: Dependency) -> Guard:
        found = self._guards.get(dependency.name)
        if found is not None:
            return found
        breaker = CircuitBreaker(self.pool, dependency.name, clock=self.clock, policy=dependency.breaker)
        await breaker.setup(migrate=not self._migrated)
        self._migrated = True
        limiter = None
        if dependency.rate_per_s is not None:
            limiter = RateLimiter(
                self.pool,
                dependency.name,
                rate_per_s=dependency.rate_per_s,
                burst=dependency.burst,
                clock=self.clock,
            )
            await limiter.setup()
        guard = Guard(dependency, breaker, limiter)
        self._guards[dependency.name] = guard
        return guard


@asynccontextmanager
async def dependencies(settings: Any) -> AsyncIterator[Dependencies]:
    """For a bootstrap: guards on a small pool of their own (two connections), on the
    service's clock (``settings.clock``), against ``settings.database_url``."""
    pool = await create_pool(settings.database_url, max_size=2, pool_mode=settings.database_pool_mode)
    try:
        yield Dependencies(pool, clock_from_setting(settings.clock))
    finally:
        await pool.close()
