"""The gateway's own tables (schema gateway): submissions by idempotency key, decisions."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from chorus.base import migrations
from chorus.kernel.service import ErasedAsRetired

DDL = [
    "CREATE SCHEMA IF NOT EXISTS gateway",
    """CREATE TABLE IF NOT EXISTS gateway.submissions (
        workflow_id text PRIMARY KEY,
        workflow_type text NOT NULL,
        submitter text NOT NULL,
        idempotency_key text,
        request_hash text NOT NULL,
        callback_url text,
        accepted_at timestamptz NOT NULL)""",
    # One workflow per (submitter, key): a retried POST finds the first one.
    """CREATE UNIQUE INDEX IF NOT EXISTS submissions_idempotency
        ON gateway.submissions (submitter, idempotency_key) WHERE idempotency_key IS NOT NULL""",
    # The workflow's trace and lane, so a reviewer's decision continues both.
    "ALTER TABLE gateway.submissions ADD COLUMN IF NOT EXISTS priority text NOT NULL DEFAULT 'normal'",
    "ALTER TABLE gateway.submissions ADD COLUMN IF NOT EXISTS traceparent text",
    """CREATE TABLE IF NOT EXISTS gateway.decisions (
        approval_id text NOT NULL,
        level int NOT NULL,
        workflow_id text NOT NULL,
        reviewer text NOT NULL,
        decision text NOT NULL,
        comment text NOT NULL,
        decided_at timestamptz NOT NULL,
        PRIMARY KEY (approval_id, level))""",
]


MIGRATIONS = [
    *migrations.baseline(DDL),
    # One cancel request per workflow: asking again answers with the first one.
    migrations.Migration(
        2,
        "cancellations",
        (
            """CREATE TABLE IF NOT EXISTS gateway.cancellations (
                workflow_id text PRIMARY KEY,
                requested_by text NOT NULL,
                reason text NOT NULL,
                requested_at timestamptz NOT NULL)""",
        ),
    ),
    migrations.Migration(
        3,
        "decisions_by_workflow",
        ("CREATE INDEX IF NOT EXISTS decisions_by_workflow ON gateway.decisions (workflow_id)",),
    ),
    # The releases the workflow is pinned to (versioned rollouts): a person's decision or
    # cancel joins the workflow with them, so no service takes it to another release.
    migrations.Migration(
        4, "submission_pins", ("ALTER TABLE gateway.submissions ADD COLUMN IF NOT EXISTS pins jsonb",)
    ),
    # Bulk actions (chorus.platform.gateway.bulk): the workflows found when it was asked for,
    # each acted on once, in the transaction that records it.
    migrations.Migration(
        5,
        "bulk_actions",
        (
            """CREATE TABLE IF NOT EXISTS gateway.bulk_actions (
                bulk_id text PRIMARY KEY,
                action text NOT NULL,
                query text NOT NULL,
                reason text NOT NULL,
                requested_by text NOT NULL,
                requested_at timestamptz NOT NULL,
                rate_per_s double precision NOT NULL,
                matched int NOT NULL,
                finished_at timestamptz)""",
            """CREATE TABLE IF NOT EXISTS gateway.bulk_items (
                bulk_id text NOT NULL REFERENCES gateway.bulk_actions ON DELETE CASCADE,
                position int NOT NULL,
                workflow_id text NOT NULL,
                workflow_type text NOT NULL,
                status text NOT NULL DEFAULT 'pending',
                detail text,
                at timestamptz,
                PRIMARY KEY (bulk_id, workflow_id))""",
            """CREATE INDEX IF NOT EXISTS bulk_items_pending ON gateway.bulk_items (bulk_id, position)
                WHERE status = 'pending'""",
            "CREATE INDEX IF NOT EXISTS bulk_items_workflow ON gateway.bulk_items (workflow_id)",
        ),
    ),
    # Signals and updates (chorus.platform.gateway.routes.signals): each sent once, with its
    # event in the same transaction; a retry with its Idempotency-Key finds it.
    migrations.Migration(
        6,
        "signals",
        (
            """CREATE TABLE IF NOT EXISTS gateway.signals (
                signal_id text PRIMARY KEY,
                workflow_id text NOT NULL,
                name text NOT NULL,
                sent_by text NOT NULL,
                idempotency_key text,
                request_hash text NOT NULL,
                as_update boolean NOT NULL,
                sent_at timestamptz NOT NULL)""",
            """CREATE UNIQUE INDEX IF NOT EXISTS signals_idempotency
                ON gateway.signals (sent_by, idempotency_key) WHERE idempotency_key IS NOT NULL""",
            "CREATE INDEX IF NOT EXISTS signals_workflow ON gateway.signals (workflow_id)",
        ),
    ),
    # Schedules (chorus.platform.gateway.scheduled): each schedule, its runs as they fall due,
    # and who changed it when.
    migrations.Migration(
        7,
        "schedules",
        (
            """CREATE TABLE IF NOT EXISTS gateway.schedules (
                schedule_id text PRIMARY KEY,
                workflow_type text NOT NULL,
                template jsonb NOT NULL,
                cron text,
                every_s double precision,
                anchor_at timestamptz NOT NULL,
                overlap text NOT NULL,
                catchup_window_s double precision NOT NULL,
                priority text NOT NULL,
                deadline_s double precision,
                note text NOT NULL,
                created_by text NOT NULL,
                created_at timestamptz NOT NULL,
                state text NOT NULL,
                last_due_at timestamptz NOT NULL,
                next_due_at timestamptz,
                armed_for timestamptz,
                request_hash text NOT NULL,
                idempotency_key text)""",
            """CREATE UNIQUE INDEX IF NOT EXISTS schedules_idempotency
                ON gateway.schedules (created_by, idempotency_key) WHERE idempotency_key IS NOT NULL""",
            """CREATE TABLE IF NOT EXISTS gateway.schedule_runs (
                schedule_id text NOT NULL REFERENCES gateway.schedules ON DELETE CASCADE,
                due_at timestamptz NOT NULL,
                kind text NOT NULL,
                status text NOT NULL,
                workflow_id text,
                detail text,
                at timestamptz,
                not_before timestamptz NOT NULL,
                PRIMARY KEY (schedule_id, due_at))""",
            """CREATE INDEX IF NOT EXISTS schedule_runs_pending ON gateway.schedule_runs (not_before, due_at)
                WHERE status IN ('due', 'buffered')""",
            """CREATE TABLE IF NOT EXISTS gateway.schedule_changes (
                seq bigserial PRIMARY KEY,
                schedule_id text NOT NULL REFERENCES gateway.schedules ON DELETE CASCADE,
                at timestamptz NOT NULL,
                by text NOT NULL,
                action text NOT NULL)""",
            "CREATE INDEX IF NOT EXISTS schedule_changes_of ON gateway.schedule_changes (schedule_id, at)",
        ),
    ),
    # A bulk action may send a signal: which, with what input.
    migrations.Migration(
        8,
        "bulk_signals",
        (
            "ALTER TABLE gateway.bulk_actions ADD COLUMN IF NOT EXISTS signal text",
            "ALTER TABLE gateway.bulk_actions ADD COLUMN IF NOT EXISTS input jsonb",
        ),
    ),
    # Resets an operator asked for: who, why, to which event, how much it undid.
    migrations.Migration(
        9,
        "resets",
        (
            """CREATE TABLE IF NOT EXISTS gateway.resets (
                reset_id text PRIMARY KEY,
                workflow_id text NOT NULL,
                point_event_id uuid NOT NULL,
                point_event_type text NOT NULL,
                undone text[] NOT NULL,
                compensated text[] NOT NULL,
                replacement_event_id uuid,
                requested_by text NOT NULL,
                reason text NOT NULL,
                requested_at timestamptz NOT NULL)""",
            "CREATE INDEX IF NOT EXISTS resets_of ON gateway.resets (workflow_id, requested_at)",
        ),
    ),
    # What a reset asked for, to tell a retry (its Idempotency-Key) from another request.
    migrations.Migration(
        10,
        "reset_request_hash",
        ("ALTER TABLE gateway.resets ADD COLUMN IF NOT EXISTS request_hash text",),
    ),
    # A bulk action may reset (to an event type), or repin (at a service, to a release).
    migrations.Migration(
        11,
        "bulk_targets",
        (
            "ALTER TABLE gateway.bulk_actions ADD COLUMN IF NOT EXISTS reset_to text",
            "ALTER TABLE gateway.bulk_actions ADD COLUMN IF NOT EXISTS service text",
            "ALTER TABLE gateway.bulk_actions ADD COLUMN IF NOT EXISTS to_release text",
            # Items this version writes are "queued": a gateway from before would take a reset,
            # redrive or repin it does not know for a cancel (chorus.platform.gateway.adapters.bulk).
            """CREATE INDEX IF NOT EXISTS bulk_items_queued ON gateway.bulk_items (bulk_id, position)
                WHERE status = 'queued'""",
        ),
    ),
]


class SubmissionRetention(ErasedAsRetired):
    """A retired workflow's submission, reviewers' decisions and cancel request go with it
    (nothing outlives its workflow here: no time-based purge of its own)."""

    workflow_tables = (
        "gateway.submissions",
        "gateway.decisions",
        "gateway.cancellations",
        "gateway.bulk_items",
        "gateway.signals",
        "gateway.resets",
    )

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        return {}


async def migrate(conn: asyncpg.Connection) -> None:
    await migrations.migrate(conn, schema="gateway", component="gateway", migrations=MIGRATIONS)


@dataclass(frozen=True)
class SubmissionRow:
    workflow_id: str
    workflow_type: str
    request_hash: str
    accepted_at: datetime
    submitter: str
    priority: str = "normal"
    traceparent: str | None = None
    pins: str | None = None
    """JSON of the workflow's pins (service -> release), when it has any."""


_COLUMNS = (
    "workflow_id, workflow_type, request_hash, accepted_at, submitter, priority, traceparent, pins::text"
)


async def find_by_key(conn: asyncpg.Connection, submitter: str, key: str) -> SubmissionRow | None:
    row = await conn.fetchrow(
        f"""SELECT {_COLUMNS} FROM gateway.submissions
           WHERE submitter = $1 AND idempotency_key = $2""",
        submitter,
        key,
    )
    return SubmissionRow(**dict(row)) if row else None


async def find_by_workflow(conn: asyncpg.Connection, workflow_id: str) -> SubmissionRow | None:
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM gateway.submissions WHERE workflow_id = $1",
        workflow_id,
    )
    return SubmissionRow(**dict(row)) if row else None


async def insert_submission(
    conn: asyncpg.Connection,
    *,
    workflow_id: str,
    workflow_type: str,
    submitter: str,
    idempotency_key: str | None,
    request_hash: str,
    callback_url: str | None,
    now: datetime,
    priority: str,
    traceparent: str,
    pins: str | None = None,
) -> bool:
    """False when a concurrent request with the same key won."""
    inserted = await conn.fetchval(
        """INSERT INTO gateway.submissions (workflow_id, workflow_type, submitter, idempotency_key,
               request_hash, callback_url, accepted_at, priority, traceparent, pins)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb)
           ON CONFLICT DO NOTHING RETURNING 1""",
        workflow_id,
        workflow_type,
        submitter,
        idempotency_key,
        request_hash,
        callback_url,
        now,
        priority,
        traceparent,
        pins,
    )
    return inserted is not None


async def insert_decision(
    conn: asyncpg.Connection,
    *,
    approval_id: str,
    level: int,
    workflow_id: str,
    reviewer: str,
    decision: str,
    comment: str,
    now: datetime,
) -> bool:
    """False when this approval already has a decision at this level (409)."""
    inserted = await conn.fetchval(
        """INSERT INTO gateway.decisions VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT DO NOTHING RETURNING 1""",
        approval_id,
        level,
        workflow_id,
        reviewer,
        decision,
        comment,
        now,
    )
    return inserted is not None


@dataclass(frozen=True)
class CancellationRow:
    workflow_id: str
    requested_by: str
    reason: str
    requested_at: datetime


async def insert_cancellation(
    conn: asyncpg.Connection, *, workflow_id: str, requested_by: str, reason: str, now: datetime
) -> CancellationRow | None:
    """The new cancel request; None when the workflow has one already (see find_cancellation)."""
    row = await conn.fetchrow(
        """INSERT INTO gateway.cancellations VALUES ($1, $2, $3, $4)
           ON CONFLICT DO NOTHING RETURNING workflow_id, requested_by, reason, requested_at""",
        workflow_id,
        requested_by,
        reason,
        now,
    )
    return CancellationRow(**dict(row)) if row else None


async def find_cancellation(conn: asyncpg.Connection, workflow_id: str) -> CancellationRow | None:
    row = await conn.fetchrow(
        """SELECT workflow_id, requested_by, reason, requested_at
           FROM gateway.cancellations WHERE workflow_id = $1""",
        workflow_id,
    )
    return CancellationRow(**dict(row)) if row else None


@dataclass(frozen=True)
class DecisionRow:
    level: int
    reviewer: str
    decision: str
    comment: str
    decided_at: datetime


async def decisions_of(conn: asyncpg.Connection, approval_id: str) -> list[DecisionRow]:
    """Decisions reviewers submitted on ``approval_id`` through this API, by level."""
    rows = await conn.fetch(
        """SELECT level, reviewer, decision, comment, decided_at FROM gateway.decisions
           WHERE approval_id = $1 ORDER BY level""",
        approval_id,
    )
    return [DecisionRow(**dict(r)) for r in rows]


async def decided_on(conn: asyncpg.Connection, workflow_id: str, reviewer: str) -> bool:
    """Whether ``reviewer`` decided an approval of this workflow (it may read it)."""
    found = await conn.fetchval(
        "SELECT 1 FROM gateway.decisions WHERE workflow_id = $1 AND reviewer = $2 LIMIT 1",
        workflow_id,
        reviewer,
    )
    return found is not None


@dataclass(frozen=True)
class ResetRow:
    reset_id: str
    workflow_id: str
    point_event_id: uuid.UUID
    point_event_type: str
    undone: list[str]
    """The types of the events after the point, in order (what the reset undoes)."""
    compensated: list[str]
    replacement_event_id: uuid.UUID | None
    requested_by: str
    reason: str
    requested_at: datetime
    request_hash: str | None


async def insert_reset(conn: asyncpg.Connection, row: ResetRow) -> bool:
    """The reset; False when one with its id was recorded before (the same request again)."""
    inserted = await conn.fetchval(
        """INSERT INTO gateway.resets
             (reset_id, workflow_id, point_event_id, point_event_type, undone, compensated,
              replacement_event_id, requested_by, reason, requested_at, request_hash)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
           ON CONFLICT (reset_id) DO NOTHING RETURNING 1""",
        row.reset_id,
        row.workflow_id,
        row.point_event_id,
        row.point_event_type,
        row.undone,
        row.compensated,
        row.replacement_event_id,
        row.requested_by,
        row.reason,
        row.requested_at,
        row.request_hash,
    )
    return inserted is not None


async def find_reset(conn: asyncpg.Connection, reset_id: str) -> ResetRow | None:
    row = await conn.fetchrow(
        """SELECT reset_id, workflow_id, point_event_id, point_event_type, undone, compensated,
                  replacement_event_id, requested_by, reason, requested_at, request_hash
           FROM gateway.resets WHERE reset_id = $1""",
        reset_id,
    )
    return ResetRow(**dict(row)) if row else None
