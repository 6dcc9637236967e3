"""The budget ledger in PostgreSQL (schema budget_agent): cost centers, reservations, the
purchase orders on record and the invoices being paid or paid.

Only this service touches these tables; handlers read through :class:`Ledger` and write
through the :class:`Reserve` and :class:`Release` effects, in the step's transaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import asyncpg

from budget_agent.domain import PurchaseOrder
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


MIGRATIONS = [
    *migrations.baseline(DDL),
    migrations.Migration(
        2,
        "purchase orders and invoices",
        (
            # The system of record an invoice is checked against (never the request).
            """CREATE TABLE budget_agent.purchase_orders (
                po_number text PRIMARY KEY,
                vendor_id text NOT NULL,
                currency text NOT NULL,
                total_cents bigint NOT NULL,
                cost_center text NOT NULL)""",
            # One row per invoice reserved for and not given back: the key makes a second
            # workflow for the same invoice fail to claim it, however the two interleave.
            """CREATE TABLE budget_agent.invoices (
                vendor_id text NOT NULL,
                invoice_number text NOT NULL,
                workflow_id text NOT NULL,
                reservation_id text NOT NULL UNIQUE,
                PRIMARY KEY (vendor_id, invoice_number))""",
        ),
    ),
]


async def migrate(conn: asyncpg.Connection) -> None:
    await migrations.migrate(conn, schema="budget_agent", component="ledger", migrations=MIGRATIONS)


async def seed_budgets(pool: asyncpg.Pool, budgets: dict[str, int]) -> None:
    """Create configured cost centers that do not exist; never touch existing ones."""
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO budget_agent.budgets (cost_center, limit_cents) VALUES ($1, $2) "
            "ON CONFLICT (cost_center) DO NOTHING",
            list(budgets.items()),
        )


async def seed_purchase_orders(pool: asyncpg.Pool, orders: list[PurchaseOrder]) -> None:
    """Record configured purchase orders that do not exist; never change existing ones."""
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO budget_agent.purchase_orders VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (po_number) DO NOTHING",
            [(o.po_number, o.vendor_id, o.currency, o.total_cents, o.cost_center) for o in orders],
        )


@dataclass(frozen=True)
class Reserve:
    """Take ``amount_cents`` from the cost center and claim the invoice; refuses (and so
    retries the handler) when a concurrent reservation used the room, or claimed the same
    invoice, in between."""

    reservation_id: str
    workflow_id: str
    cost_center: str
    amount_cents: int
    invoice: tuple[str, str]
    """(vendor id, invoice number) as :func:`budget_agent.domain.invoice_key` makes it."""

    async def apply(self, conn: asyncpg.Connection) -> None:
        claimed = await conn.fetchval(
            """INSERT INTO budget_agent.invoices VALUES ($1, $2, $3, $4)
               ON CONFLICT DO NOTHING RETURNING 1""",
            *self.invoice,
            self.workflow_id,
            self.reservation_id,
        )
        if claimed is None:
            raise ConflictError(f"invoice {self.invoice} was claimed while deciding")
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
    """Give a reservation back, once; and its invoice too unless ``keep_invoice`` (it may
    have been paid: then only a person who checked with the provider frees it)."""

    reservation_id: str
    keep_invoice: bool = False

    async def apply(self, conn: asyncpg.Connection) -> None:
        if not self.keep_invoice:
            await conn.execute(
                "DELETE FROM budget_agent.invoices WHERE reservation_id = $1", self.reservation_id
            )
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

    async def purchase_order(self, po_number: str) -> PurchaseOrder | None:
        """The purchase order on record; None when there is none."""
        ...

    async def invoice_holder(self, invoice: tuple[str, str]) -> str | None:
        """The workflow that reserved for this invoice and did not give it back; None if none."""
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

    async def purchase_order(self, po_number: str) -> PurchaseOrder | None:
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT * FROM budget_agent.purchase_orders WHERE po_number = $1", po_number
            )
        return PurchaseOrder.model_validate(dict(row)) if row is not None else None

    async def invoice_holder(self, invoice: tuple[str, str]) -> str | None:
        async with self.pool.acquire() as conn:
            holder = await conn.fetchval(
                "SELECT workflow_id FROM budget_agent.invoices WHERE vendor_id = $1 AND invoice_number = $2",
                *invoice,
            )
        return str(holder) if holder is not None else None
