"""The notifier's tables: ``deliveries`` (one row per message: what, to whom, by which
channel, its state) and ``attempts`` (every try, with its error), and the effects its
handlers return (written in the transaction of the event's inbox row).

A delivery is ``pending`` until it is ``delivered``, ``given_up`` (its attempts ran out)
or ``superseded`` (the approval was decided, escalated past its tier, or its workflow
ended: a late message would only mislead). The sender claims due rows with a lease
(FOR UPDATE SKIP LOCKED: replicas take disjoint ones), sends outside any transaction,
then records the attempt.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from chorus.base import migrations
from chorus.base.db import rows_affected
from chorus.kernel.service import ErasedAsRetired
from chorus.platform.notifier.domain import Notice, Recipient

SCHEMA = "notifier"
PENDING, DELIVERED, GIVEN_UP, SUPERSEDED = "pending", "delivered", "given_up", "superseded"

DDL = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.deliveries (
        delivery_id uuid PRIMARY KEY,
        workflow_id text NOT NULL,
        approval_id text NOT NULL,
        kind text NOT NULL,
        level int NOT NULL,
        channel text NOT NULL,
        recipient text NOT NULL,
        notice jsonb NOT NULL,
        status text NOT NULL,
        attempts int NOT NULL DEFAULT 0,
        next_attempt_at timestamptz NOT NULL,
        last_error text,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        delivered_at timestamptz)""",
    f"""CREATE INDEX IF NOT EXISTS deliveries_due ON {SCHEMA}.deliveries (next_attempt_at)
        WHERE status = '{PENDING}'""",
    f"CREATE INDEX IF NOT EXISTS deliveries_workflow ON {SCHEMA}.deliveries (workflow_id)",
    f"CREATE INDEX IF NOT EXISTS deliveries_approval ON {SCHEMA}.deliveries (approval_id)",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.attempts (
        delivery_id uuid NOT NULL REFERENCES {SCHEMA}.deliveries ON DELETE CASCADE,
        attempt int NOT NULL,
        at timestamptz NOT NULL,
        ok boolean NOT NULL,
        error text,
        duration_ms double precision NOT NULL,
        PRIMARY KEY (delivery_id, attempt))""",
]

MIGRATIONS = [*migrations.baseline(DDL)]


async def migrate(conn: asyncpg.Connection) -> None:
    await migrations.migrate(conn, schema=SCHEMA, component="deliveries", migrations=MIGRATIONS)


def delivery_id(event_id: str, recipient: Recipient) -> uuid.UUID:
    """The same event and recipient always make the same delivery (a redelivered event
    plans nothing new)."""
    return uuid.uuid5(
        uuid.NAMESPACE_URL, f"chorus:notifier:{event_id}:{recipient.channel}:{recipient.recipient}"
    )


@dataclass(frozen=True)
class PlanDeliveries:
    """One pending delivery per recipient of ``notice``, due now."""

    event_id: str
    notice: Notice
    recipients: Sequence[Recipient]
    now: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        if not self.recipients:
            return
        await conn.executemany(
            f"""INSERT INTO {SCHEMA}.deliveries
                  (delivery_id, workflow_id, approval_id, kind, level, channel, recipient, notice,
                   status, next_attempt_at, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, '{PENDING}', $9, $9, $9)
                ON CONFLICT (delivery_id) DO NOTHING""",
            [
                (
                    delivery_id(self.event_id, r),
                    self.notice.workflow_id,
                    self.notice.approval_id,
                    self.notice.kind.value,
                    self.notice.level,
                    r.channel.value,
                    r.recipient,
                    self.notice.model_dump_json(),
                    self.now,
                )
                for r in self.recipients
            ],
        )


@dataclass(frozen=True)
class SupersedeDeliveries:
    """Stop trying the pending deliveries of ``workflow_id`` (of one approval when given):
    what they say is no longer true."""

    workflow_id: str
    approval_id: str | None
    reason: str
    now: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"""UPDATE {SCHEMA}.deliveries SET status = '{SUPERSEDED}', last_error = $3, updated_at = $4
                WHERE workflow_id = $1 AND ($2::text IS NULL OR approval_id = $2) AND status = '{PENDING}'""",
            self.workflow_id,
            self.approval_id,
            self.reason,
            self.now,
        )


@dataclass(frozen=True)
class Claimed:
    delivery_id: uuid.UUID
    channel: str
    recipient: str
    notice: Notice
    attempt: int
    """The attempt about to be made (1-based)."""


async def claim_due(conn: asyncpg.Connection, now: datetime, limit: int, lease_s: float) -> list[Claimed]:
    """Due pending deliveries, leased for ``lease_s`` (a replica that dies mid-send leaves
    them to be tried again when the lease ends)."""
    rows = await conn.fetch(
        f"""WITH due AS (
              SELECT delivery_id FROM {SCHEMA}.deliveries
              WHERE status = '{PENDING}' AND next_attempt_at <= $1
              ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED)
            UPDATE {SCHEMA}.deliveries d SET next_attempt_at = $3, attempts = d.attempts + 1, updated_at = $1
            FROM due WHERE d.delivery_id = due.delivery_id
            RETURNING d.delivery_id, d.channel, d.recipient, d.notice::text AS notice, d.attempts""",
        now,
        limit,
        now + timedelta(seconds=lease_s),
    )
    return [
        Claimed(
            r["delivery_id"],
            r["channel"],
            r["recipient"],
            Notice.model_validate_json(r["notice"]),
            r["attempts"],
        )
        for r in rows
    ]


async def record_attempt(
    conn: asyncpg.Connection,
    claimed: Claimed,
    *,
    at: datetime,
    error: str | None,
    duration_ms: float,
    retry_at: datetime | None,
) -> str:
    """Record the attempt; the delivery is delivered (no error), tried again at
    ``retry_at``, or given up (an error and no ``retry_at``). Returns its new status; a
    delivery superseded while it was being sent stays superseded."""
    status = DELIVERED if error is None else (PENDING if retry_at is not None else GIVEN_UP)
    async with conn.transaction():
        await conn.execute(
            f"""INSERT INTO {SCHEMA}.attempts (delivery_id, attempt, at, ok, error, duration_ms)
                VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING""",
            claimed.delivery_id,
            claimed.attempt,
            at,
            error is None,
            error,
            duration_ms,
        )
        updated = await conn.fetchval(
            f"""UPDATE {SCHEMA}.deliveries
                SET status = $2, last_error = $3, next_attempt_at = COALESCE($4, next_attempt_at),
                    delivered_at = CASE WHEN $2 = '{DELIVERED}' THEN $5::timestamptz END, updated_at = $5
                WHERE delivery_id = $1 AND status = '{PENDING}' RETURNING status""",
            claimed.delivery_id,
            status,
            error,
            retry_at,
            at,
        )
    return str(updated or SUPERSEDED)


async def next_due(conn: asyncpg.Connection) -> datetime | None:
    due: datetime | None = await conn.fetchval(
        f"SELECT min(next_attempt_at) FROM {SCHEMA}.deliveries WHERE status = '{PENDING}'"
    )
    return due


async def list_deliveries(
    conn: asyncpg.Connection, *, workflow_id: str | None, approval_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """Deliveries (newest first) with every attempt: what an operator asks when a reviewer
    says "I was never told"."""
    rows = await conn.fetch(
        f"""SELECT d.delivery_id, d.workflow_id, d.approval_id, d.kind, d.level, d.channel, d.recipient,
                   d.status, d.attempts, d.next_attempt_at, d.last_error, d.created_at, d.delivered_at,
                   COALESCE((SELECT json_agg(json_build_object(
                              'attempt', a.attempt, 'at', a.at, 'ok', a.ok, 'error', a.error,
                              'duration_ms', a.duration_ms) ORDER BY a.attempt)
                             FROM {SCHEMA}.attempts a WHERE a.delivery_id = d.delivery_id),
                            '[]')::text AS tries
            FROM {SCHEMA}.deliveries d
            WHERE ($1::text IS NULL OR d.workflow_id = $1) AND ($2::text IS NULL OR d.approval_id = $2)
            ORDER BY d.created_at DESC, d.delivery_id LIMIT $3""",
        workflow_id,
        approval_id,
        limit,
    )
    found = []
    for r in rows:
        row = {k: v for k, v in dict(r).items() if k != "tries"}
        row["delivery_id"] = str(row["delivery_id"])
        for key in ("next_attempt_at", "created_at", "delivered_at"):
            row[key] = row[key].isoformat() if row[key] else None
        row["attempt_log"] = json.loads(r["tries"])
        found.append(row)
    return found


class DeliveryRetention(ErasedAsRetired):
    """A retired (or erased) workflow's messages go with it; finished ones (delivered,
    given up, superseded) after ``keep_s``."""

    workflow_tables = (f"{SCHEMA}.deliveries",)

    def __init__(self, keep_s: float = 30 * 86400.0) -> None:
        self.keep_s = keep_s

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        deleted = await conn.execute(
            f"DELETE FROM {SCHEMA}.deliveries WHERE status <> '{PENDING}' AND updated_at < $1",
            now - timedelta(seconds=self.keep_s),
        )
        return {f"{SCHEMA}.deliveries": rows_affected(deleted)}
