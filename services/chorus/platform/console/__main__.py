"""``python -m chorus.platform.console``: serve the console (CHORUS_HTTP_PORT, 8120 by default)."""

from __future__ import annotations

import asyncio

import uvicorn

from chorus.observability.logs import setup_logging
from chorus.platform.console.bootstrap import bootstrap
from chorus.platform.console.config import Settings
from chorus.runtime.settings import load_settings


async def serve(settings: Settings) -> None:
    async with bootstrap(settings) as app:
        config = uvicorn.Config(
            app,
            host=settings.http_host,
            port=settings.http_port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            limit_concurrency=200,
            timeout_graceful_shutdown=5,
        )
        await uvicorn.Server(config).serve()


if __name__ == "__main__":
    settings = load_settings(Settings, kafka=False)  # a client of HTTP APIs only
    setup_logging("console", level=settings.log_level, json_lines=settings.log_json)
    asyncio.run(serve(settings))
