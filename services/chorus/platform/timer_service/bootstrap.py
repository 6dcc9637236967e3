"""Wiring: the timer service's handlers need no dependencies of their own: they write
timers through effects; the firing loop uses the runtime handle (pool, clock, outbox)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[None]:
    yield None
