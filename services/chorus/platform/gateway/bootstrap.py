"""Wiring: what the gateway's handlers get (the webhook sender, a circuit breaker per
receiver host). Its API is wired in server.py, from the same settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from chorus.outside.dependencies import Dependency, dependencies
from chorus.platform.gateway.adapters.webhooks import WebhookSender


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[WebhookSender]:
    receivers = Dependency(name="webhooks", breaker=settings.webhook_breaker)
    async with httpx.AsyncClient() as client, dependencies(settings) as guards:
        yield WebhookSender(
            client,
            settings.webhook_secret,
            settings.webhook_timeout_s,
            settings.webhook_secrets,
            guards=guards,
            receivers=receivers,
        )
