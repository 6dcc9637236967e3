"""The budget ledger in PostgreSQL (schema budget_agent): cost centers, reservations, the
purchase orders on record and the invoices being paid or paid.

Only this service touches these tables; handlers read through :class:`Ledger` and write
through the :class:`Reserve` and :class:`Release` effects, in the step's transaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import asyncpg

from chorus import migrations
from chorus.reference.budget_agent.domain import PurchaseOrder
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
    migrations.Migration(
        3,
        "what is invoiced against each purchase order",
        (
            # Several invoices against one order may not together exceed it. Reservations
            # made before this migration name no order and count against none.
            """ALTER TABLE budget_agent.purchase_orders
                ADD COLUMN invoiced_cents bigint NOT NULL DEFAULT 0""",
            "ALTER TABLE budget_agent.reservations ADD COLUMN po_number text",
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
            "INSERT INTO budget_agent.purchase_orders (po_number, vendor_id, currency, total_cents, "
            "cost_center) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (po_number) DO NOTHING",
            [(o.po_number, o.vendor_id, o.currency, o.total_cents, o.cost_center) for o in orders],
        )


@dataclass(frozen=True)
class Reserve:
    """Take ``amount_cents`` from the cost center and from what remains on the purchase
    order, and claim the invoice; refuses (and so retries the handler, which then reads
    what is left) when a concurrent reservation used the room, or claimed the same invoice,
    in between."""

    reservation_id: str
    workflow_id: str
    cost_center: str
    amount_cents: int
    invoice: tuple[str, str]
    """(vendor id, invoice number) as :func:`chorus.reference.budget_agent.domain.invoice_key` makes it."""
    po_number: str

    async def apply(self, conn: asyncpg.Connection) -> None:
        await _or_conflict(
            conn,
            f"invoice {self.invoice} was claimed while deciding",
            """INSERT INTO budget_agent.invoices VALUES ($1, $2, $3, $4)
               ON CONFLICT DO NOTHING RETURNING 1""",
            *self.invoice,
            self.workflow_id,
            self.reservation_id,
        )
        await _or_conflict(
            conn,
            f"budget {self.cost_center} changed while deciding",
            """UPDATE budget_agent.budgets SET reserved_cents = reserved_cents + $2
               WHERE cost_center = $1 AND reserved_cents + $2 <= limit_cents RETURNING 1""",
            self.cost_center,
            self.amount_cents,
        )
        await _or_conflict(
            conn,
            f"purchase order {self.po_number} was invoiced while deciding",
            """UPDATE budget_agent.purchase_orders SET invoiced_cents = invoiced_cents + $2
               WHERE po_number = $1 AND invoiced_cents + $2 <= total_cents RETURNING 1""",
            self.po_number,
            self.amount_cents,
        )
        # A reservation given back by a reset (its step runs again) is taken anew.
        await _or_conflict(
            conn,
            f"reservation {self.reservation_id} is held already",
            """INSERT INTO budget_agent.reservations AS r
                 (reservation_id, workflow_id, cost_center, amount_cents, status, po_number)
               VALUES ($1, $2, $3, $4, 'reserved', $5)
               ON CONFLICT (reservation_id) DO UPDATE
                 SET cost_center = EXCLUDED.cost_center, amount_cents = EXCLUDED.amount_cents,
                     status = 'reserved', po_number = EXCLUDED.po_number
                 WHERE r.status = 'released'
               RETURNING 1""",
            self.reservation_id,
            self.workflow_id,
            self.cost_center,
            self.amount_cents,
            self.po_number,
        )


async def _or_conflict(conn: asyncpg.Connection, conflict: str, query: str, *args: object) -> None:
    """``query`` (which returns a row only when it took what it asks for), or a conflict:
    the step runs again and decides on what it reads then."""
    if await conn.fetchval(query, *args) is None:
        raise ConflictError(conflict)


@dataclass(frozen=True)
class Release:
    """Give a reservation back, once; and its invoice and its share of the purchase order
    too unless ``keep_invoice`` (it may have been paid: then only a person who checked with
    the provider frees them)."""

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
               RETURNING cost_center, amount_cents, po_number""",
            self.reservation_id,
        )
        if row is None:
            return
        await conn.execute(
            "UPDATE budget_agent.budgets SET reserved_cents = reserved_cents - $2 WHERE cost_center = $1",
            row["cost_center"],
            row["amount_cents"],
        )
        if not self.keep_invoice and row["po_number"] is not None:
            await conn.execute(
                """UPDATE budget_agent.purchase_orders SET invoiced_cents = invoiced_cents - $2
                   WHERE po_number = $1""",
                row["po_number"],
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
