"""What the API answers about workflows and approvals, asked of the audit projector's
read API over HTTP: the gateway never reads another service's tables."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from chorus.web.webapi import PROBLEM

ON_BEHALF_OF = "X-Chorus-On-Behalf-Of"


class ReadModelUnavailableError(Exception):
    """The audit projector did not answer: the API says 503, the caller may retry."""


class ReadModel:
    def __init__(self, client: httpx.AsyncClient, base_url: str, timeout_s: float = 10.0) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    async def _get(self, path: str, params: dict[str, str] | None = None, *, for_whom: str) -> Any | None:
        # The projector logs each read of personal data, naming whom the gateway read it for.
        headers = {ON_BEHALF_OF: for_whom}
        url = f"{self.base_url}{path}"
        try:
            try:
                response = await self.client.get(url, params=params, headers=headers, timeout=self.timeout_s)
            except (httpx.ReadError, httpx.RemoteProtocolError):
                # A pooled connection the projector closed as we reused it; a GET is safe
                # to send again, once, on a fresh one.
                response = await self.client.get(url, params=params, headers=headers, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise ReadModelUnavailableError(f"audit projector at {self.base_url}: {exc!r}") from exc
        problem = response.headers.get("content-type", "").startswith(PROBLEM)
        if response.status_code == 404 and problem:
            return None  # the projector says: no such workflow or approval
        # Anything else (a 404 without a problem: not the projector's API at all) is the
        # read model being unavailable, not "unknown".
        if response.status_code != 200:
            raise ReadModelUnavailableError(f"audit projector answered {response.status_code} for {path}")
        return response.json()

    async def workflow(self, workflow_id: str, *, for_whom: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = await self._get(
            f"/v1/workflows/{quote(workflow_id, safe='')}", for_whom=for_whom
        )
        return found

    async def timeline(self, workflow_id: str, *, for_whom: str) -> list[dict[str, Any]]:
        body = await self._get(f"/v1/workflows/{quote(workflow_id, safe='')}/timeline", for_whom=for_whom)
        return list(body["timeline"]) if body else []

    async def workflows(self, params: dict[str, Any], *, for_whom: str) -> dict[str, Any]:
        """A page: ``{"workflows": [...], "next_cursor": ...}`` (the projector's filters)."""
        body = await self._get("/v1/workflows", params, for_whom=for_whom)
        return dict(body) if body else {"workflows": [], "next_cursor": None}

    async def approval(self, approval_id: str, *, for_whom: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = await self._get(
            f"/v1/approvals/{quote(approval_id, safe='')}", for_whom=for_whom
        )
        return found

    async def pending_approvals(self, tier: str | None, *, for_whom: str) -> list[dict[str, Any]]:
        body = await self._get(
            "/v1/approvals", {"tier": tier} if tier is not None else None, for_whom=for_whom
        )
        return list(body["approvals"]) if body else []
