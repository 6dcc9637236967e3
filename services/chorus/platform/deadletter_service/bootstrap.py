"""Wiring: the dead-letter service's handlers need no dependencies of their own: they
store letters through effects; its API and gauges use the runtime handle (pool, clock,
outbox)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[None]:
    yield None
