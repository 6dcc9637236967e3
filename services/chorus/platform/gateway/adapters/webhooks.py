"""Completion callbacks: POST the result to the URL the submitter registered, signed as
Standard Webhooks (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import httpx

from chorus.outside.dependencies import Dependency, Guards
from chorus.outside.external import call_json
from chorus.platform.gateway.domain import receiver_secrets, webhook_signature


class WebhookSender:
    def __init__(
        self,
        client: httpx.AsyncClient,
        secret: str,
        timeout_s: float,
        per_receiver: dict[str, str] | None = None,
        *,
        guards: Guards,
        receivers: Dependency,
    ) -> None:
        self.client = client
        self.secret = secret
        self.per_receiver = per_receiver or {}
        self.timeout_s = timeout_s
        self.guards = guards
        self.receivers = receivers
        """Each receiver host is a dependency of its own (``webhooks:<host>``)."""

    async def send(self, url: str, body: dict[str, Any], *, delivery_id: str, now: datetime) -> int:
        """POST once; non-2xx raises (transient: retried with backoff by the runtime)."""
        payload = json.dumps(body, sort_keys=True).encode()
        timestamp = str(int(now.timestamp()))
        guard = await self.guards.guard(self.receivers.keyed(httpx.URL(url).host))
        async with guard.call():
            response = await call_json(
                self.client,
                "POST",
                url,
                what="completion webhook",
                content=payload,
                headers={
                    "Content-Type": "application/json",
                    # The delivery id is the same on every retry: receivers dedupe on it.
                    "webhook-id": delivery_id,
                    "webhook-timestamp": timestamp,
                    "webhook-signature": webhook_signature(
                        receiver_secrets(url, self.per_receiver, self.secret), delivery_id, timestamp, payload
                    ),
                },
                timeout_s=self.timeout_s,
                submitter_url=True,
            )
        return response.status_code
