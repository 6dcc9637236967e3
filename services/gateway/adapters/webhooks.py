"""Completion callbacks: POST the result, signed, to the URL the submitter registered."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import httpx

from chorus.external import call_json
from gateway.domain import sign


class WebhookSender:
    def __init__(self, client: httpx.AsyncClient, secret: str, timeout_s: float) -> None:
        self.client = client
        self.secret = secret
        self.timeout_s = timeout_s

    async def send(self, url: str, body: dict[str, Any], *, delivery_id: str, now: datetime) -> int:
        """POST once; non-2xx raises (transient: retried with backoff by the runtime)."""
        payload = json.dumps(body, sort_keys=True).encode()
        timestamp = str(int(now.timestamp()))
        response = await call_json(
            self.client,
            "POST",
            url,
            what="completion webhook",
            content=payload,
            headers={
                "Content-Type": "application/json",
                "X-Chorus-Timestamp": timestamp,
                "X-Chorus-Signature": sign(self.secret, timestamp, payload),
                "X-Chorus-Delivery": delivery_id,
            },
            timeout_s=self.timeout_s,
            submitter_url=True,
        )
        return response.status_code
