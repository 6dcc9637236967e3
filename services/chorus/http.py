"""A small HTTP server every service runs: ``/health`` and ``/metrics``, plus its own routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from chorus.metrics import Metrics

HealthCheck = Callable[[], Awaitable[dict[str, Any]]]


class HttpServer:
    def __init__(self, host: str, port: int, metrics: Metrics, health: HealthCheck) -> None:
        self.host, self.port = host, port
        self.metrics = metrics
        self.health = health
        self.app = web.Application()
        self.app.router.add_get("/health", self._health)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner: web.AppRunner | None = None

    async def _health(self, _: web.Request) -> web.Response:
        body = await self.health()
        # Degraded (records stuck behind an outage) still serves; starting or failing does not.
        status = 200 if body.get("status") in ("ok", "degraded") else 503
        return web.json_response(body, status=status)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        # Port 0 picks a free port; report the real one.
        sockets = getattr(site._server, "sockets", None)
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
