"""The sandbox (the outside world's stand-in) in this test process, with projects' plugins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from chorus.reference.sandbox.app import SandboxConfig, create_app


@asynccontextmanager
async def sandbox_running(*plugins: str) -> AsyncIterator[str]:
    """Its base URL while it serves on a free port of 127.0.0.1 (``plugins``: modules such
    as a project's ``support_sandbox``, importable from here)."""
    runner = web.AppRunner(create_app(SandboxConfig(plugins=plugins)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
