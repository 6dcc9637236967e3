"""The signals the gateway sent (schema gateway): who sent which, as a signal or an update,
found again by its id or by its sender's Idempotency-Key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg


@dataclass(frozen=True)
class SignalRow:
    signal_id: str
    workflow_id: str
    name: str
    sent_by: str
    request_hash: str
    as_update: bool
    sent_at: datetime


_COLUMNS = "signal_id, workflow_id, name, sent_by, request_hash, as_update, sent_at"


async def insert_signal(conn: asyncpg.Connection, row: SignalRow, idempotency_key: str | None) -> bool:
    """False when the sender's key was taken meanwhile (a concurrent retry won)."""
    inserted = await conn.fetchval(
        f"""INSERT INTO gateway.signals ({_COLUMNS}, idempotency_key)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING RETURNING 1""",
        row.signal_id,
        row.workflow_id,
        row.name,
        row.sent_by,
        row.request_hash,
        row.as_update,
        row.sent_at,
        idempotency_key,
    )
    return inserted is not None


async def find_signal(conn: asyncpg.Connection, signal_id: str) -> SignalRow | None:
    row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM gateway.signals WHERE signal_id = $1", signal_id)
    return SignalRow(**dict(row)) if row else None


async def find_signal_by_key(conn: asyncpg.Connection, sent_by: str, key: str) -> SignalRow | None:
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM gateway.signals WHERE sent_by = $1 AND idempotency_key = $2", sent_by, key
    )
    return SignalRow(**dict(row)) if row else None
