"""The approval policy, managed at the approval gate's API: the gateway forwards its callers'
requests there with their own key (the gate records who changed what), and never touches
the gate's tables."""

from __future__ import annotations

from typing import Any

import httpx

from chorus.web.webapi import PROBLEM


class PolicyApiUnavailableError(Exception):
    """The approval gate did not answer: the API says 503, the caller may retry."""


class ApprovalPolicyApi:
    def __init__(self, client: httpx.AsyncClient, base_url: str, timeout_s: float = 10.0) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    async def forward(
        self,
        method: str,
        path: str,
        authorization: str,
        body: Any = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """The gate's status and JSON body (a problem passes through as it is)."""
        try:
            response = await self.client.request(
                method,
                f"{self.base_url}{path}",
                json=body,
                params=params,
                headers={"Authorization": authorization},
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as exc:
            raise PolicyApiUnavailableError(f"approval gate at {self.base_url}: {exc!r}") from exc
        content_type = response.headers.get("content-type", "")
        if not (content_type.startswith("application/json") or content_type.startswith(PROBLEM)):
            raise PolicyApiUnavailableError(f"approval gate answered {response.status_code} for {path}")
        return response.status_code, response.json()
