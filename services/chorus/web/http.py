"""The HTTP server every service runs: ``/health`` and ``/metrics``, plus its own API.

One stack for every HTTP surface (FastAPI on uvicorn, :mod:`chorus.web.webapi`'s problem+json,
body cap and strict JSON; :mod:`chorus.web.apikeys`' keys and roles). ``/health`` and
``/metrics`` need no key (probes and Prometheus scrape them; they hold no workflow data)
and stay out of the OpenAPI document; everything a service adds is behind a key.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import httpx
import uvicorn
from fastapi import APIRouter, FastAPI, Response
from fastapi.responses import JSONResponse

from chorus.base.metrics import Metrics
from chorus.base.settings import ChorusSettings
from chorus.web.apikeys import ApiKey
from chorus.web.heads import BoundedHeads
from chorus.web.webapi import create_api, problems

HealthCheck = Callable[[], Awaitable[dict[str, Any]]]


# uvicorn closes a connection that stayed idle for its keep-alive (5 s by default). A client
# keeping idle connections as long may send a request on one the server is just closing: the
# request fails with a ReadError although both sides are healthy. Clients of Chorus APIs let
# an idle connection go well before the server would.
CLIENT_KEEPALIVE_S = 2.0


class WebSettings(ChorusSettings):
    http_host: str = "127.0.0.1"
    http_port: int = 0
    """Where /health, /metrics and the service's own API listen (0: a free port)."""


def api_client(**kwargs: Any) -> httpx.AsyncClient:
    """An HTTP client for another Chorus service's API (see ``CLIENT_KEEPALIVE_S``)."""
    return httpx.AsyncClient(limits=httpx.Limits(keepalive_expiry=CLIENT_KEEPALIVE_S), **kwargs)


class EmbeddedServer(uvicorn.Server):
    """uvicorn inside a service's own event loop: no signal handling of its own (the
    service owns SIGTERM and shuts the server down)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


KEEP_ALIVE_S = 8.0
"""How long an idle keep-alive connection stays open: longer than clients keep one for
reuse (httpx, which every Chorus service and test uses, 5 s). At equal times the server's
close races the client's next request, which fails with no answer: a POST is not retried."""


def server_config(
    app: FastAPI, *, max_connections: int = 100, keep_alive_s: float = KEEP_ALIVE_S, **more: Any
) -> uvicorn.Config:
    # The API shares its process and event loop with the consumer and relay: a flood of
    # connections, idle keep-alives or huge header blocks must not starve them.
    return uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        limit_concurrency=max_connections,
        timeout_keep_alive=int(keep_alive_s),
        timeout_graceful_shutdown=5,
        # uvicorn's h11 parser, so that this bound holds (httptools takes a head of any size),
        # with heads bounded in time and idle connections left out of the limit (web.heads).
        http=BoundedHeads,
        h11_max_incomplete_event_size=16 * 1024,
        **more,
    )


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        metrics: Metrics,
        health: HealthCheck,
        *,
        title: str = "Chorus service",
        api_keys: Mapping[str, ApiKey] | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.metrics = metrics
        self.health = health
        self.app = create_api(
            title=title, version="1.0.0", responses=problems(401, 403, 413, 415, 422), metrics=metrics
        )
        self.app.state.api_keys = dict(api_keys or {})
        self.app.add_api_route("/health", self._health, methods=["GET"], include_in_schema=False)
        self.app.add_api_route("/health/ready", self._health, methods=["GET"], include_in_schema=False)
        self.app.add_api_route("/health/live", self._live, methods=["GET"], include_in_schema=False)
        self.app.add_api_route("/metrics", self._metrics, methods=["GET"], include_in_schema=False)
        self._server: EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None

    def include(self, router: APIRouter) -> None:
        """Add a service's own routes (before :meth:`start`)."""
        self.app.include_router(router)

    async def _health(self) -> JSONResponse:
        # Also readiness: the server starts only once the service is (database migrated,
        # consumer joined, rollout policies read to their end). Consumer lag is not part of
        # it: readiness gates HTTP traffic, and lag is the autoscaler's signal.
        body = await self.health()
        # Degraded (records stuck behind an outage) still serves; starting or failing does not.
        status = 200 if body.get("status") in ("ok", "degraded") else 503
        return JSONResponse(body, status_code=status)

    async def _live(self) -> JSONResponse:
        """Liveness (a restart helps): 503 only when the service stopped or its consumer gave
        up. Records stuck behind an outage are not a reason to restart: Kafka or PostgreSQL
        is down, and a new process would wait the same."""
        body = await self.health()
        alive = body.get("status") != "failing"
        return JSONResponse({"status": "alive" if alive else "failing"}, status_code=200 if alive else 503)

    async def _metrics(self) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; charset=utf-8")

    async def start(self) -> None:
        # The socket is bound here, so a port in use is an OSError naming it (uvicorn would
        # exit the process), and port 0 tells the port it picked.
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host, self.port), family=family, reuse_port=False)
        self.port = sock.getsockname()[1]
        self._server = EmbeddedServer(server_config(self.app))
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=f"http:{self.port}")
        while not self._server.started:
            if self._task.done():
                await self._task  # raises what stopped it
                raise RuntimeError(f"HTTP server on port {self.port} stopped while starting")
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
