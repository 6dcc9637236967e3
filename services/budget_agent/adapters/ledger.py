"""The budget ledger in PostgreSQL (schema budget_agent): cost centers and reservations.

Only this service touches these tables; handlers read through :class:`Ledger` and write
through the :class:`Reserve` and :class:`Release` effects, in the step's transaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import asyncpg

from chorus import migrations
from chorus.store import ConflictError

DDL = [
    "CREATE SCHEMA IF NOT EXISTS budget_agent",
    """CREATE TABLE IF NOT EXISTS budget_agent.budgets (
        cost_center text PRIMARY KEY,
        limit_cents bigint NOT NULL,
        reserved_cents bigint NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS budget_agent.reservations (
        reservation_id text PRIMARY KEY,
        workflow_id text NOT NULL,
        cost_center text NOT NULL,
        amount_cents bigint NOT NULL,
        status text NOT NULL)""",
]


async def migrate(conn: asyncpg.Connection) -> None:
    await migrations.migrate(
        conn, schema="budget_agent", component="ledger", migrations=migrations.baseline(DDL)
    )


async def seed_budgets(pool: asyncpg.Pool, budgets: dict[str, int]) -> None:
    """Create configured cost centers that do not exist; never touch existing ones."""
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO budget_agent.budgets (cost_center, limit_cents) VALUES ($1, $2) "
            "ON CONFLICT (cost_center) DO NOTHING",
            list(budgets.items()),
        )


@dataclass(frozen=True)
class Reserve:
    """Take ``amount_cents`` from the cost center; refuses (and so retries the handler)
    when a concurrent reservation used the room in between."""

    reservation_id: str
    workflow_id: str
    cost_center: str
    amount_cents: int

    async def apply(self, conn: asyncpg.Connection) -> None:
        updated = await conn.fetchval(
            """UPDATE budget_agent.budgets SET reserved_cents = reserved_cents + $2
               WHERE cost_center = $1 AND reserved_cents + $2 <= limit_cents RETURNING 1""",
            self.cost_center,
            self.amount_cents,
        )
        if updated is None:
            raise ConflictError(f"budget {self.cost_center} changed while deciding")
        await conn.execute(
            """INSERT INTO budget_agent.reservations VALUES ($1, $2, $3, $4, 'reserved')""",
            self.reservation_id,
            self.workflow_id,
            self.cost_center,
            self.amount_cents,
        )


@dataclass(frozen=True)
class Release:
    """Give a reservation back, once."""

    reservation_id: str

    async def apply(self, conn: asyncpg.Connection) -> None:
        row = await conn.fetchrow(
            """UPDATE budget_agent.reservations SET status = 'released'
               WHERE reservation_id = $1 AND status = 'reserved'
               RETURNING cost_center, amount_cents""",
            self.reservation_id,
        )
        if row is not None:
            await conn.execute(
                "UPDATE budget_agent.budgets SET reserved_cents = reserved_cents - $2 WHERE cost_center = $1",
                row["cost_center"],
                row["amount_cents"],
            )


class BudgetLookup(Protocol):
    async def available(self, cost_center: str) -> int | None:
        """Cents still free on the cost center; None when it does not exist."""
        ...


class Ledger:
    """The cost centers in PostgreSQL (what the handlers read; Reserve and Release write)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def available(self, cost_center: str) -> int | None:
        async with self.pool.acquire() as conn:
            value = await conn.fetchval(
                "SELECT limit_cents - reserved_cents FROM budget_agent.budgets WHERE cost_center = $1",
                cost_center,
            )
        return int(value) if value is not None else None
