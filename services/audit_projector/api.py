"""The projection's read API, JSON over HTTP beside ``/health`` and ``/metrics``.

Other services learn a workflow's status, timeline and approvals here, never from the
projector's tables (the gateway answers its users from this API).

GET /v1/workflows/{workflow_id}            status, stage, what it waits for
GET /v1/workflows/{workflow_id}/timeline   its events in the order they happened
GET /v1/approvals?tier=<tier>              open approvals, soonest deadline first
GET /v1/approvals/{approval_id}            one approval gate, decided or not

Errors are RFC 9457 problem+json: 404 an unknown id, 400 a parameter over its bound.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from audit_projector.adapters import queries
from chorus.service import RuntimeHandle

PROBLEM = "application/problem+json"
MAX_ID = 200

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def routes(rt: RuntimeHandle) -> list[web.RouteDef]:
    api = ReadApi(rt)
    return [
        web.get("/v1/workflows/{workflow_id}", api.workflow),
        web.get("/v1/workflows/{workflow_id}/timeline", api.timeline),
        web.get("/v1/approvals", api.approvals),
        web.get("/v1/approvals/{approval_id}", api.approval),
    ]


def _problem(status: int, title: str, detail: str, instance: str) -> web.Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "instance": instance}
    return web.json_response(body, status=status, content_type=PROBLEM)


def _id(request: web.Request, name: str) -> str | web.Response:
    value = request.match_info[name]
    if len(value) > MAX_ID:
        return _problem(400, "Invalid parameter", f"{name}: at most {MAX_ID} characters", request.path)
    return value


class ReadApi:
    def __init__(self, rt: RuntimeHandle) -> None:
        self.rt = rt
        self.schema = rt.service

    async def _one(
        self, request: web.Request, name: str, read: Callable[..., Awaitable[Any]]
    ) -> web.Response:
        key = _id(request, name)
        if isinstance(key, web.Response):
            return key
        async with self.rt.pool.acquire() as conn:
            found = await read(conn, key, schema=self.schema)
        if found is None:
            return _problem(404, "Not found", f"no {name.removesuffix('_id')} {key!r}", request.path)
        return web.json_response(found)

    async def workflow(self, request: web.Request) -> web.Response:
        return await self._one(request, "workflow_id", queries.workflow_status)

    async def approval(self, request: web.Request) -> web.Response:
        return await self._one(request, "approval_id", queries.approval)

    async def timeline(self, request: web.Request) -> web.Response:
        key = _id(request, "workflow_id")
        if isinstance(key, web.Response):
            return key
        async with self.rt.pool.acquire() as conn:
            entries = await queries.timeline(conn, key, schema=self.schema)
        return web.json_response({"workflow_id": key, "timeline": entries})

    async def approvals(self, request: web.Request) -> web.Response:
        tier = request.query.get("tier")
        if tier is not None and len(tier) > MAX_ID:
            return _problem(400, "Invalid parameter", f"tier: at most {MAX_ID} characters", request.path)
        async with self.rt.pool.acquire() as conn:
            items = await queries.pending_approvals(conn, tier, schema=self.schema)
        return web.json_response({"tier": tier, "approvals": items})
