"""What the API answers about workflows and approvals, asked of the audit projector's
read API over HTTP: the gateway never reads another service's tables. Each answer is the
model the projector publishes (:mod:`chorus.contracts.api.audit_projector`)."""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from chorus.contracts.api.audit_projector import (
    ApprovalTask,
    ApprovalTasks,
    ApprovalView,
    Timeline,
    TimelineEntry,
    WorkflowList,
    WorkflowStatusView,
)
from chorus.web.typedclient import UnexpectedAnswerError, answer
from chorus.web.webapi import PROBLEM

ON_BEHALF_OF = "X-Chorus-On-Behalf-Of"
M = TypeVar("M", bound=BaseModel)


class ReadModelUnavailableError(Exception):
    """The audit projector did not answer, or answered what its API does not publish: the
    API says 503, the caller may retry."""


class ReadModel:
    def __init__(self, client: httpx.AsyncClient, base_url: str, timeout_s: float = 10.0) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    async def _get(
        self, model: type[M], path: str, params: dict[str, Any] | None = None, *, for_whom: str
    ) -> M | None:
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
        try:
            return answer(model, response)
        except UnexpectedAnswerError as exc:
            raise ReadModelUnavailableError(str(exc)) from None

    async def workflow(self, workflow_id: str, *, for_whom: str) -> WorkflowStatusView | None:
        return await self._get(
            WorkflowStatusView, f"/v1/workflows/{quote(workflow_id, safe='')}", for_whom=for_whom
        )

    async def timeline(self, workflow_id: str, *, for_whom: str) -> list[TimelineEntry]:
        path = f"/v1/workflows/{quote(workflow_id, safe='')}/timeline"
        found = await self._get(Timeline, path, for_whom=for_whom)
        return found.timeline if found else []

    async def workflows(self, params: dict[str, Any], *, for_whom: str) -> WorkflowList:
        """A page (the projector's filters: ``params``)."""
        found = await self._get(WorkflowList, "/v1/workflows", params, for_whom=for_whom)
        return found or WorkflowList(workflows=[], next_cursor=None)

    async def signal_answer(self, workflow_id: str, signal_id: str, *, for_whom: str) -> TimelineEntry | None:
        """The workflow's answer to a signal (None: none projected yet)."""
        path = f"/v1/workflows/{quote(workflow_id, safe='')}/signals/{quote(signal_id, safe='')}/answer"
        return await self._get(TimelineEntry, path, for_whom=for_whom)

    async def approval(self, approval_id: str, *, for_whom: str) -> ApprovalView | None:
        return await self._get(
            ApprovalView, f"/v1/approvals/{quote(approval_id, safe='')}", for_whom=for_whom
        )

    async def pending_approvals(self, tier: str | None, *, for_whom: str) -> list[ApprovalTask]:
        params = {"tier": tier} if tier is not None else None
        found = await self._get(ApprovalTasks, "/v1/approvals", params, for_whom=for_whom)
        return found.approvals if found else []
