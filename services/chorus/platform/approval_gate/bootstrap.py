"""Wiring: what the approval gate's handlers get (the chain for reviews, the approval policy,
and each workflow type's approval chain from the registry's workflows.yaml).

The gate talks to nothing outside Chorus; its state is each workflow's checkpoint, and
its policy versions are a table of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chorus.base.db import create_pool
from chorus.contracts.approvals import EscalationStep, Fallback
from chorus.contracts.registry import Registry, load_registry
from chorus.platform.approval_gate.adapters.policies import PolicyStore


@dataclass(frozen=True)
class Deps:
    review_chain: list[EscalationStep]
    review_fallback: Fallback
    policies: PolicyStore
    chains: Mapping[str, list[EscalationStep]] = field(default_factory=dict)
    """Workflow type -> its ``approval_chain`` (workflows.yaml): where no policy rule matches."""


def approval_chains(registry: Registry) -> dict[str, list[EscalationStep]]:
    return {name: list(w.approval_chain) for name, w in registry.workflows.items() if w.approval_chain}


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[Deps]:
    pool = await create_pool(settings.database_url, max_size=2, pool_mode=settings.database_pool_mode)
    try:
        registry = load_registry(Path(settings.schemas_dir) if settings.schemas_dir else None)
        yield Deps(
            list(settings.review_chain),
            settings.review_fallback,
            PolicyStore(pool),
            approval_chains(registry),
        )
    finally:
        await pool.close()
