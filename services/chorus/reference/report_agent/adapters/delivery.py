"""Delivering an approved report: POST it to the URL the request named."""

from __future__ import annotations

from typing import Any

import httpx

from chorus.external import call_json


class Delivery:
    def __init__(self, client: httpx.AsyncClient, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s

    async def deliver(self, url: str, report: dict[str, Any], key: str) -> int:
        response = await call_json(
            self.client,
            "POST",
            url,
            what="report delivery",
            json=report,
            headers={"Idempotency-Key": key},
            timeout_s=self.timeout_s,
            submitter_url=True,
        )
        return response.status_code
