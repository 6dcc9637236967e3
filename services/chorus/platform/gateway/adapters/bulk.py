"""The gateway's bulk actions (tables ``bulk_actions`` and ``bulk_items``, made by the
gateway's migrations): what was asked, the workflows found then, and each one's fate.

An item goes from ``pending`` to ``done`` or ``skipped`` once, in the transaction that does
what it says (chorus.platform.gateway.bulk), so a crash anywhere leaves it either untouched
or fully done, and a restart carries on with what is still pending.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

PENDING, DONE, SKIPPED = "pending", "done", "skipped"
QUEUED = "queued"
"""Pending, as this version writes it: a gateway from before resets, redrives and repins
claims only ``pending`` items, and would take any action it does not know for a cancel."""
TO_DO = (PENDING, QUEUED)


@dataclass(frozen=True)
class Found:
    """A workflow a bulk action's query found."""

    workflow_id: str
    workflow_type: str


@dataclass(frozen=True)
class Asked:
    bulk_id: str
    action: str
    query: str
    reason: str
    requested_by: str
    requested_at: datetime
    rate_per_s: float
    signal: str | None = None
    input: dict[str, Any] | None = None
    reset_to: str | None = None
    service: str | None = None
    to_release: str | None = None


async def create(conn: asyncpg.Connection, asked: Asked, found: Sequence[Found]) -> bool:
    """The action and its items, in one transaction; False when ``bulk_id`` exists already
    (a retried request with the same Idempotency-Key)."""
    async with conn.transaction():
        inserted = await conn.fetchval(
            """INSERT INTO gateway.bulk_actions
                 (bulk_id, action, query, reason, requested_by, requested_at, rate_per_s, matched,
                  signal, input, reset_to, service, to_release)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12, $13)
               ON CONFLICT (bulk_id) DO NOTHING
               RETURNING bulk_id""",
            asked.bulk_id,
            asked.action,
            asked.query,
            asked.reason,
            asked.requested_by,
            asked.requested_at,
            asked.rate_per_s,
            len(found),
            asked.signal,
            json.dumps(asked.input) if asked.input is not None else None,
            asked.reset_to,
            asked.service,
            asked.to_release,
        )
        if inserted is None:
            return False
        await conn.executemany(
            f"""INSERT INTO gateway.bulk_items (bulk_id, position, workflow_id, workflow_type, status)
               VALUES ($1, $2, $3, $4, '{QUEUED}') ON CONFLICT DO NOTHING""",
            [(asked.bulk_id, i, f.workflow_id, f.workflow_type) for i, f in enumerate(found)],
        )
    return True


@dataclass(frozen=True)
class Claimed:
    """A pending item, locked by this transaction."""

    bulk_id: str
    workflow_id: str
    workflow_type: str
    action: str
    reason: str
    requested_by: str
    rate_per_s: float
    signal: str | None
    input: dict[str, Any] | None
    reset_to: str | None
    service: str | None
    to_release: str | None


async def next_batch(conn: asyncpg.Connection, limit: int, actions: Sequence[str]) -> list[Claimed]:
    """Up to ``limit`` items to do of the oldest action of the kinds this gateway knows
    (``actions``: a later version's are left to it), locked until the caller's transaction
    ends (replicas skip them: each takes items of its own)."""
    rows = await conn.fetch(
        """SELECT i.bulk_id, i.workflow_id, i.workflow_type, a.action, a.reason, a.requested_by,
                  a.rate_per_s, a.signal, a.input::text AS input, a.reset_to, a.service, a.to_release
           FROM gateway.bulk_items i JOIN gateway.bulk_actions a USING (bulk_id)
           WHERE i.status = ANY($2::text[]) AND a.action = ANY($3::text[])
           ORDER BY a.requested_at, i.bulk_id, i.position
           LIMIT $1 FOR UPDATE OF i SKIP LOCKED""",
        limit,
        list(TO_DO),
        list(actions),
    )
    return [Claimed(**{**dict(r), "input": json.loads(r["input"]) if r["input"] else None}) for r in rows]


async def settle(
    conn: asyncpg.Connection, item: Claimed, status: str, detail: str | None, at: datetime
) -> None:
    await conn.execute(
        """UPDATE gateway.bulk_items SET status = $3, detail = $4, at = $5
           WHERE bulk_id = $1 AND workflow_id = $2 AND status = ANY($6::text[])""",
        item.bulk_id,
        item.workflow_id,
        status,
        detail,
        at,
        list(TO_DO),
    )


async def finish_done(conn: asyncpg.Connection, at: datetime) -> list[str]:
    """Mark finished the actions with nothing pending; their ids."""
    rows = await conn.fetch(
        """UPDATE gateway.bulk_actions a SET finished_at = $1
           WHERE finished_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM gateway.bulk_items i
                             WHERE i.bulk_id = a.bulk_id AND i.status = ANY($2::text[]))
           RETURNING bulk_id""",
        at,
        list(TO_DO),
    )
    return [r["bulk_id"] for r in rows]


_WITH_COUNTS = f"""SELECT a.bulk_id, a.action, a.signal, a.input::text AS input, a.reset_to, a.service,
                  a.to_release, a.query, a.reason,
                  a.requested_by, a.requested_at, a.rate_per_s, a.matched, a.finished_at,
                  count(*) FILTER (WHERE i.status IN ('{PENDING}', '{QUEUED}')) AS pending,
                  count(*) FILTER (WHERE i.status = '{DONE}') AS done,
                  count(*) FILTER (WHERE i.status = '{SKIPPED}') AS skipped
           FROM gateway.bulk_actions a LEFT JOIN gateway.bulk_items i USING (bulk_id)"""


async def recent(conn: asyncpg.Connection, limit: int) -> list[dict[str, Any]]:
    """The latest ``limit`` actions with their counts (no items), newest first."""
    rows = await conn.fetch(
        f"{_WITH_COUNTS} GROUP BY a.bulk_id ORDER BY a.requested_at DESC, a.bulk_id LIMIT $1", limit
    )
    return [{**dict(r), "items": []} for r in rows]


async def find(conn: asyncpg.Connection, bulk_id: str, items: int = 100) -> dict[str, Any] | None:
    """The action with its counts and its first ``items`` items (by the order found)."""
    row = await conn.fetchrow(f"{_WITH_COUNTS} WHERE a.bulk_id = $1 GROUP BY a.bulk_id", bulk_id)
    if row is None:
        return None
    listed = await conn.fetch(
        # Queued is pending, as a reader sees it (the difference is only whom it is for).
        f"""SELECT workflow_id, CASE WHEN status = '{QUEUED}' THEN '{PENDING}' ELSE status END AS status,
                  detail, at
           FROM gateway.bulk_items WHERE bulk_id = $1 ORDER BY position LIMIT $2""",
        bulk_id,
        items,
    )
    return {**dict(row), "items": [dict(r) for r in listed]}
