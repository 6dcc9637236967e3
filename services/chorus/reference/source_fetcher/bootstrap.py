"""Wiring: what the source fetcher's handler gets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from chorus.dependencies import Dependency, dependencies
from chorus.reference.source_fetcher.adapters.sources import Sources


@dataclass(frozen=True)
class Deps:
    sources: Sources


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[Deps]:
    hosts = Dependency(name="sources", breaker=settings.source_breaker)
    async with httpx.AsyncClient() as client, dependencies(settings) as guards:
        yield Deps(sources=Sources(client, settings.source_timeout_s, guards, hosts))
