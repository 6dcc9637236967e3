"""Runs the FastAPI app inside the service process, beside the runtime's consumer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import uvicorn

from chorus.service import RuntimeHandle
from gateway.adapters.readmodel import ReadModel
from gateway.api import create_app


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the runtime owns SIGTERM and shuts down."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_api(rt: RuntimeHandle) -> None:
    settings = rt.settings
    async with httpx.AsyncClient() as client:
        await _serve(rt, ReadModel(client, settings.audit_url))


async def _serve(rt: RuntimeHandle, reads: ReadModel) -> None:
    settings = rt.settings
    config = uvicorn.Config(
        create_app(rt, settings, reads),
        host=settings.api_host,
        port=settings.api_port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        # The API shares its process and event loop with the consumer and relay: a flood of
        # connections, idle keep-alives or huge header blocks must not starve them.
        limit_concurrency=settings.api_max_connections,
        timeout_keep_alive=int(settings.api_keep_alive_s),
        h11_max_incomplete_event_size=16 * 1024,
    )
    server = _EmbeddedServer(config)
    try:
        await server.serve()
    finally:
        server.should_exit = True
