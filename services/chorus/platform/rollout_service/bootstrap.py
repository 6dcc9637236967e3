"""Wiring: the rollout service's handlers record through effects; its API and its rule use
the runtime handle (pool, clock, outbox): no dependencies of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[None]:
    yield None
