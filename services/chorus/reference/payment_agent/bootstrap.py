"""Wiring: what the payment agent's handlers get (the provider's client, from settings,
behind the provider's shared rate limit and circuit breaker)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from chorus.dependencies import Dependency, dependencies
from chorus.reference.payment_agent.adapters.payments import PaymentClient


@dataclass(frozen=True)
class Deps:
    payments: PaymentClient
    max_attempts: int = 6


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[Deps]:
    provider = Dependency(
        name="payments", rate_per_s=settings.payment_rate_per_s, breaker=settings.payment_breaker
    )
    async with httpx.AsyncClient() as client, dependencies(settings) as deps:
        yield Deps(
            PaymentClient(
                client,
                settings.payment_api_url,
                settings.payment_api_key,
                settings.payment_timeout_s,
                await deps.guard(provider),
            ),
            settings.payment_max_attempts,
        )
