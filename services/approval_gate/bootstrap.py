"""Wiring: what the approval gate's handlers get (the chain for reviews, the approval policy).

The gate talks to nothing outside Chorus; its state is each workflow's checkpoint, and
its policy versions are a table of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from approval_gate.adapters.policies import PolicyStore
from chorus.base.db import create_pool
from chorus_contracts.approvals import EscalationStep, Fallback


@dataclass(frozen=True)
class Deps:
    review_chain: list[EscalationStep]
    review_fallback: Fallback
    policies: PolicyStore


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[Deps]:
    pool = await create_pool(settings.database_url, max_size=2)
    try:
        yield Deps(list(settings.review_chain), settings.review_fallback, PolicyStore(pool))
    finally:
        await pool.close()
