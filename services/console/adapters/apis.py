"""The public APIs the console is a client of, each called with the signed-in person's
own API key: the gateway (workflows, approvals, who am I), the dead-letter service,
outcome analytics and the notifier. The console has no other source of data."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx


class ApiProblem(Exception):
    """The API refused (4xx): its problem+json title and detail, shown to the person."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status, self.title, self.detail = status, title, detail


class ApiUnavailable(Exception):
    """An API did not answer, or answered 5xx: the page says which and to try again."""


def _path(*parts: str) -> str:
    return "/".join(quote(p, safe="") for p in parts)


class Apis:
    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        gateway: str,
        deadletters: str,
        analytics: str,
        notifier: str,
    ) -> None:
        self.client = client
        self.gateway = gateway.rstrip("/")
        self.deadletters = deadletters.rstrip("/")
        self.analytics = analytics.rstrip("/")
        self.notifier = notifier.rstrip("/")

    async def _call(self, key: str, method: str, url: str, **kwargs: Any) -> Any:
        try:
            response = await self.client.request(
                method, url, headers={"Authorization": f"Bearer {key}"}, **kwargs
            )
        except httpx.HTTPError as exc:
            raise ApiUnavailable(
                f"{url.split('/v1', maxsplit=1)[0]} did not answer ({type(exc).__name__})"
            ) from exc
        if response.status_code >= 500:
            raise ApiUnavailable(f"{url.split('/v1', maxsplit=1)[0]} answered {response.status_code}")
        if response.status_code >= 400:
            try:
                problem = response.json()
                raise ApiProblem(response.status_code, str(problem["title"]), str(problem["detail"]))
            except (ValueError, KeyError, TypeError):
                raise ApiProblem(response.status_code, "Refused", response.text[:300]) from None
        return response.json()

    # -- the gateway --------------------------------------------------------------------------

    async def me(self, key: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._call(key, "GET", f"{self.gateway}/v1/me")
        return found

    async def approvals(self, key: str) -> list[dict[str, Any]]:
        body = await self._call(key, "GET", f"{self.gateway}/v1/approvals", params={"assignee": "me"})
        return list(body["approvals"])

    async def approval(self, key: str, approval_id: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._call(
            key, "GET", f"{self.gateway}/v1/approvals/{_path(approval_id)}"
        )
        return found

    async def decide(self, key: str, approval_id: str, decision: str, comment: str) -> dict[str, Any]:
        url = f"{self.gateway}/v1/approvals/{_path(approval_id)}"
        answer: dict[str, Any] = await self._call(
            key, "POST", url, json={"decision": decision, "comment": comment}
        )
        return answer

    async def workflows(self, key: str, params: dict[str, Any]) -> dict[str, Any]:
        page: dict[str, Any] = await self._call(key, "GET", f"{self.gateway}/v1/workflows", params=params)
        return page

    async def workflow(self, key: str, workflow_id: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._call(
            key, "GET", f"{self.gateway}/v1/workflows/{_path(workflow_id)}"
        )
        return found

    async def cancel(self, key: str, workflow_id: str, reason: str) -> dict[str, Any]:
        url = f"{self.gateway}/v1/workflows/{_path(workflow_id)}/cancel"
        answer: dict[str, Any] = await self._call(key, "POST", url, json={"reason": reason})
        return answer

    # -- the dead-letter service ----------------------------------------------------------------

    async def letters(self, key: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        body = await self._call(key, "GET", f"{self.deadletters}/v1/dead-letters", params=params)
        return list(body["items"])

    async def letter(self, key: str, letter_id: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._call(
            key, "GET", f"{self.deadletters}/v1/dead-letters/{_path(letter_id)}"
        )
        return found

    async def redrive(self, key: str, letter_id: str, reason: str) -> dict[str, Any]:
        url = f"{self.deadletters}/v1/dead-letters/{_path(letter_id)}/redrive"
        answer: dict[str, Any] = await self._call(key, "POST", url, json={"reason": reason})
        return answer

    async def discard(self, key: str, letter_id: str, reason: str) -> dict[str, Any]:
        url = f"{self.deadletters}/v1/dead-letters/{_path(letter_id)}/discard"
        answer: dict[str, Any] = await self._call(key, "POST", url, json={"reason": reason})
        return answer

    # -- outcome analytics and the notifier ---------------------------------------------------------

    async def outcomes(self, key: str) -> list[dict[str, Any]]:
        body = await self._call(key, "GET", f"{self.analytics}/analytics/outcomes")
        return list(body["buckets"])

    async def releases(self, key: str) -> list[dict[str, Any]]:
        body = await self._call(key, "GET", f"{self.analytics}/analytics/releases")
        return list(body["releases"])

    async def notifications(self, key: str, approval_id: str) -> list[dict[str, Any]]:
        body = await self._call(
            key, "GET", f"{self.notifier}/v1/notifications", params={"approval_id": approval_id}
        )
        return list(body["notifications"])
