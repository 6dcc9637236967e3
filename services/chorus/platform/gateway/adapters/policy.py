"""The approval policy, managed at the approval gate's API: the gateway forwards its callers'
requests there with their own key (the gate records who changed what), and never touches
the gate's tables. Answers are the gate's published models
(:mod:`chorus.contracts.api.approval_gate`); a refusal comes back as the gate's problem."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from chorus.contracts.api.approval_gate import ApprovalPolicyHistory, ApprovalPolicyVersion
from chorus.contracts.approvals import ApprovalPolicyChange
from chorus.web.typedclient import UnexpectedAnswerError, answer
from chorus.web.webapi import PROBLEM

M = TypeVar("M", bound=BaseModel)
PATH = "/v1/approval-policy"


class PolicyApiUnavailableError(Exception):
    """The approval gate did not answer, or not as its API says: the API says 503, the
    caller may retry."""


class PolicyRefusedError(Exception):
    """The gate refused the request (its key, its role, the body): its problem+json, as it is."""

    def __init__(self, status: int, problem: Any) -> None:
        super().__init__(f"approval gate answered {status}")
        self.status, self.problem = status, problem


class ApprovalPolicyApi:
    def __init__(self, client: httpx.AsyncClient, base_url: str, timeout_s: float = 10.0) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    async def current(self, authorization: str) -> ApprovalPolicyVersion:
        return await self._call(ApprovalPolicyVersion, "GET", PATH, authorization)

    async def change(self, body: ApprovalPolicyChange, authorization: str) -> ApprovalPolicyVersion:
        return await self._call(
            ApprovalPolicyVersion, "PUT", PATH, authorization, json=body.model_dump(mode="json")
        )

    async def history(self, limit: int, authorization: str) -> ApprovalPolicyHistory:
        params = {"limit": str(limit)}
        return await self._call(ApprovalPolicyHistory, "GET", f"{PATH}/history", authorization, params=params)

    async def _call(self, model: type[M], method: str, path: str, authorization: str, **kwargs: Any) -> M:
        """The gate's answer as ``model``; :class:`PolicyRefusedError` with its problem."""
        try:
            response = await self.client.request(
                method,
                f"{self.base_url}{path}",
                headers={"Authorization": authorization},
                timeout=self.timeout_s,
                **kwargs,
            )
        except httpx.HTTPError as exc:
            raise PolicyApiUnavailableError(f"approval gate at {self.base_url}: {exc!r}") from exc
        content_type = response.headers.get("content-type", "")
        if response.status_code >= 400 and content_type.startswith(PROBLEM):
            try:
                problem = response.json()
            except ValueError:
                raise PolicyApiUnavailableError(
                    f"approval gate answered {response.status_code} for {path}"
                ) from None
            raise PolicyRefusedError(response.status_code, problem)
        if not response.is_success:
            raise PolicyApiUnavailableError(f"approval gate answered {response.status_code} for {path}")
        try:
            return answer(model, response)
        except UnexpectedAnswerError as exc:
            raise PolicyApiUnavailableError(str(exc)) from None
