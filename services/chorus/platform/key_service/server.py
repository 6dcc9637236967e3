"""Serves the data-key API over TLS only, on its own port (``CHORUS_API_PORT``), beside the
runtime's plain ``/health`` and ``/metrics`` (which hold no secret, and which probes and
Prometheus read without a certificate). A data key is the one secret that opens personal
data: it never travels in clear, so there is no plain-HTTP way to ask for one."""

from __future__ import annotations

from chorus.kernel.service import RuntimeHandle
from chorus.platform.key_service.api import routes
from chorus.web.http import EmbeddedServer, server_config
from chorus.web.webapi import create_api, problems


async def serve_keys(rt: RuntimeHandle) -> None:
    settings = rt.settings
    app = create_api(
        title="Chorus key service",
        version="1.0.0",
        description="Data keys for the services that seal and open personal data.",
        responses=problems(401, 403, 413, 415, 422),
    )
    app.include_router(routes(rt))
    config = server_config(app, host=settings.api_host, port=settings.api_port, **settings.tls().uvicorn())
    server = EmbeddedServer(config)
    try:
        await server.serve()
    finally:
        server.should_exit = True
