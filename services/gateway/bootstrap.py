"""Wiring: what the gateway's handlers get (the webhook sender). Its API is wired in
server.py, from the same settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from gateway.adapters.webhooks import WebhookSender


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[WebhookSender]:
    async with httpx.AsyncClient() as client:
        yield WebhookSender(
            client, settings.webhook_secret, settings.webhook_timeout_s, settings.webhook_secrets
        )
