"""The ``timer_service.timers`` table and the effects handlers return.

Timers are rows; a pending timer costs a row and an index entry, no memory.
The partial index on pending due times keeps "what is due now" cheap with
hundreds of thousands of timers waiting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from chorus.base import migrations
from chorus.base.db import rows_affected
from chorus.kernel.service import ErasedAsRetired
from chorus.platform.timer_service.domain import CANCELLED, FIRED, PENDING

SCHEMA = "timer_service"

DDL = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.timers (
        timer_id text PRIMARY KEY,
        due_at timestamptz,
        status text NOT NULL,
        topic text,
        key text,
        envelope jsonb,
        purpose text NOT NULL DEFAULT 'other',
        workflow_id text,
        scheduled_by text,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        fired_at timestamptz,
        lateness_ms double precision,
        cancel_reason text)""",
    f"""CREATE INDEX IF NOT EXISTS timers_pending_due
        ON {SCHEMA}.timers (due_at) WHERE status = '{PENDING}'""",
]


MIGRATIONS = [
    *migrations.baseline(DDL),
    migrations.Migration(
        2,
        "pending_by_workflow",
        (
            f"""CREATE INDEX IF NOT EXISTS timers_pending_by_workflow
                ON {SCHEMA}.timers (workflow_id) WHERE status = '{PENDING}'""",
        ),
    ),
    # Retirement removes every timer of a workflow, fired and cancelled ones too.
    migrations.Migration(
        3,
        "by_workflow",
        (
            f"DROP INDEX IF EXISTS {SCHEMA}.timers_pending_by_workflow",
            f"CREATE INDEX IF NOT EXISTS timers_by_workflow ON {SCHEMA}.timers (workflow_id)",
        ),
    ),
    # A fired envelope may be signed by its scheduler: it is kept as the text that was
    # signed (jsonb would rewrite numbers, 1e+20 as 100000000000000000000, and break the
    # signature), with the signature beside it.
    migrations.Migration(
        4,
        "signed_fires",
        (
            f"ALTER TABLE {SCHEMA}.timers ALTER COLUMN envelope TYPE text USING envelope::text",
            f"ALTER TABLE {SCHEMA}.timers ADD COLUMN IF NOT EXISTS signature text",
        ),
    ),
]


async def migrate(conn: asyncpg.Connection) -> None:
    await migrations.migrate(conn, schema=SCHEMA, component="timers", migrations=MIGRATIONS)


@dataclass(frozen=True)
class ScheduleTimerRow:
    """Insert a pending timer; an existing id (pending, fired or cancelled) wins."""

    timer_id: str
    due_at: datetime
    topic: str
    key: str
    envelope: dict[str, Any]
    purpose: str
    workflow_id: str
    scheduled_by: str
    now: datetime
    signature: str | None = None

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"""INSERT INTO {SCHEMA}.timers
                  (timer_id, due_at, status, topic, key, envelope, purpose, workflow_id,
                   scheduled_by, created_at, updated_at, signature)
                VALUES ($1, $2, '{PENDING}', $3, $4, $5, $6, $7, $8, $9, $9, $10)
                ON CONFLICT (timer_id) DO NOTHING""",
            self.timer_id,
            self.due_at,
            self.topic,
            self.key,
            json.dumps(self.envelope),
            self.purpose,
            self.workflow_id,
            self.scheduled_by,
            self.now,
            self.signature,
        )


@dataclass(frozen=True)
class CancelTimerRow:
    """Cancel a pending timer. Unknown ids get a cancelled tombstone, so a schedule
    that arrives later (it cannot on one key, but can from a redrive) never fires."""

    timer_id: str
    reason: str
    workflow_id: str
    now: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"""INSERT INTO {SCHEMA}.timers
                  (timer_id, status, workflow_id, created_at, updated_at, cancel_reason)
                VALUES ($1, '{CANCELLED}', $3, $4, $4, $2)
                ON CONFLICT (timer_id) DO UPDATE
                  SET status = '{CANCELLED}', cancel_reason = $2, updated_at = $4
                  WHERE {SCHEMA}.timers.status = '{PENDING}'""",
            self.timer_id,
            self.reason,
            self.workflow_id,
            self.now,
        )


@dataclass(frozen=True)
class CancelWorkflowTimers:
    """Cancel every pending timer of a workflow that ended, but its durable retries: a
    retry of a step still running (the end's own compensation) must fire, and the runtime
    drops the retries of anything else once the workflow has ended."""

    workflow_id: str
    reason: str
    now: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"""UPDATE {SCHEMA}.timers SET status = '{CANCELLED}', cancel_reason = $2, updated_at = $3
                WHERE workflow_id = $1 AND status = '{PENDING}' AND purpose <> 'retry'""",
            self.workflow_id,
            self.reason,
            self.now,
        )


@dataclass(frozen=True)
class RescheduleTimerRow:
    timer_id: str
    due_at: datetime
    now: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"""UPDATE {SCHEMA}.timers SET due_at = $2, updated_at = $3
                WHERE timer_id = $1 AND status = '{PENDING}'""",
            self.timer_id,
            self.due_at,
            self.now,
        )


@dataclass(frozen=True)
class DueTimer:
    timer_id: str
    due_at: datetime
    topic: str
    key: str
    envelope: dict[str, Any]
    signature: str | None


async def claim_due(conn: asyncpg.Connection, now: datetime, limit: int) -> list[DueTimer]:
    """Lock a batch of due timers; rows another replica holds are skipped, not waited for."""
    rows = await conn.fetch(
        f"""SELECT timer_id, due_at, topic, key, envelope, signature
            FROM {SCHEMA}.timers
            WHERE status = '{PENDING}' AND due_at <= $1
            ORDER BY due_at
            LIMIT $2
            FOR UPDATE SKIP LOCKED""",
        now,
        limit,
    )
    return [
        DueTimer(r["timer_id"], r["due_at"], r["topic"], r["key"], json.loads(r["envelope"]), r["signature"])
        for r in rows
    ]


async def mark_fired(conn: asyncpg.Connection, fired: list[tuple[str, float]], now: datetime) -> None:
    await conn.executemany(
        f"""UPDATE {SCHEMA}.timers SET status = '{FIRED}', fired_at = $3, lateness_ms = $2,
                updated_at = $3 WHERE timer_id = $1""",
        [(timer_id, lateness_ms, now) for timer_id, lateness_ms in fired],
    )


async def next_due(conn: asyncpg.Connection) -> datetime | None:
    value: datetime | None = await conn.fetchval(
        f"SELECT min(due_at) FROM {SCHEMA}.timers WHERE status = '{PENDING}'"
    )
    return value


async def pending_count(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval(f"SELECT count(*) FROM {SCHEMA}.timers WHERE status = '{PENDING}'"))


@dataclass(frozen=True)
class TimerRetention(ErasedAsRetired):
    """A retired workflow's timers go with it: pending, fired (their stored envelopes carry
    the workflow's data) and cancelled ones. Fired and cancelled timers go on their own
    ``keep_done_s`` after they were (kept that long to answer "did it fire, when, how late")."""

    keep_done_s: float = 7 * 86400.0
    workflow_tables = (f"{SCHEMA}.timers",)

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        deleted = await conn.execute(
            f"""DELETE FROM {SCHEMA}.timers WHERE status IN ('{FIRED}', '{CANCELLED}') AND updated_at < $1""",
            now - timedelta(seconds=self.keep_done_s),
        )
        return {f"{SCHEMA}.timers": rows_affected(deleted)}
