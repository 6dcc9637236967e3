"""Wiring: what the budget agent's handlers get (the ledger, the approval chain)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from chorus.db import create_pool
from chorus.reference.budget_agent.adapters.ledger import (
    BudgetLookup,
    Ledger,
    seed_budgets,
    seed_purchase_orders,
)


@dataclass(frozen=True)
class Deps:
    ledger: BudgetLookup
    chain: list[Any]
    fallback: Any


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[Deps]:
    pool = await create_pool(settings.database_url, max_size=4, pool_mode=settings.database_pool_mode)
    await seed_budgets(pool, settings.budgets)
    await seed_purchase_orders(pool, settings.purchase_orders)
    try:
        yield Deps(Ledger(pool), list(settings.approval_chain), settings.approval_fallback)
    finally:
        await pool.close()
