"""Wiring: what the approval gate's handlers get (its settings: the chain for reviews).

The gate talks to nothing outside Chorus; its state is each workflow's checkpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from chorus_contracts.approvals import EscalationStep, Fallback


@dataclass(frozen=True)
class Deps:
    review_chain: list[EscalationStep]
    review_fallback: Fallback


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[Deps]:
    yield Deps(list(settings.review_chain), settings.review_fallback)
