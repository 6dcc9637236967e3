"""Wiring: what the payment agent's handlers get (the provider's client, from settings)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from payment_agent.adapters.payments import PaymentClient


@dataclass(frozen=True)
class Deps:
    payments: PaymentClient
    max_attempts: int = 6


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[Deps]:
    async with httpx.AsyncClient() as client:
        yield Deps(
            PaymentClient(
                client,
                settings.payment_api_url,
                settings.payment_api_key,
                settings.payment_timeout_s,
            ),
            settings.payment_max_attempts,
        )
