"""Schedules (schema gateway): each schedule, and its runs as they fall due.

A run is recorded ``due`` (or ``missed``, older than the catch-up window) when the
schedule's timer fires; the schedule worker starts it, buffers it or skips it as the overlap
policy says. The timer of the next run is armed by the worker too, in the transaction that
records it (``armed_for``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from chorus.platform.gateway.domain import Cadence, catch_up, next_due

ACTIVE, PAUSED, DELETED = "active", "paused", "deleted"
DUE, BUFFERED, STARTED, SKIPPED, MISSED = "due", "buffered", "started", "skipped", "missed"
RUNS_SHOWN = 20
MISSED_LISTED = 100
"""Missed runs beyond these many are one row saying how many (a long outage of a busy one)."""

_SCHEDULE = """schedule_id, workflow_type, template, cron, every_s, anchor_at, overlap, catchup_window_s,
    priority, deadline_s, note, created_by, created_at, state, last_due_at, next_due_at, armed_for,
    request_hash"""


@dataclass(frozen=True)
class ScheduleRow:
    schedule_id: str
    workflow_type: str
    template: dict[str, Any]
    """The start event's envelope, its personal data sealed under the schedule's scope."""
    cron: str | None
    every_s: float | None
    anchor_at: datetime
    overlap: str
    catchup_window_s: float
    priority: str
    deadline_s: float | None
    note: str
    created_by: str
    created_at: datetime
    state: str
    last_due_at: datetime
    next_due_at: datetime | None
    armed_for: datetime | None
    request_hash: str

    @property
    def cadence(self) -> Cadence:
        return Cadence(self.cron, self.every_s, self.anchor_at)


@dataclass(frozen=True)
class RunRow:
    schedule_id: str
    due_at: datetime
    kind: str
    status: str
    workflow_id: str | None
    detail: str | None
    at: datetime | None


def _schedule(row: asyncpg.Record) -> ScheduleRow:
    return ScheduleRow(**{**dict(row), "template": json.loads(row["template"])})


async def insert(conn: asyncpg.Connection, row: ScheduleRow, idempotency_key: str | None) -> bool:
    """False when the creator's key was taken (a concurrent retry won)."""
    inserted = await conn.fetchval(
        f"""INSERT INTO gateway.schedules ({_SCHEDULE}, idempotency_key)
            VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                    $18, $19)
            ON CONFLICT DO NOTHING RETURNING 1""",
        row.schedule_id,
        row.workflow_type,
        json.dumps(row.template),
        row.cron,
        row.every_s,
        row.anchor_at,
        row.overlap,
        row.catchup_window_s,
        row.priority,
        row.deadline_s,
        row.note,
        row.created_by,
        row.created_at,
        row.state,
        row.last_due_at,
        row.next_due_at,
        row.armed_for,
        row.request_hash,
        idempotency_key,
    )
    return inserted is not None


async def find(conn: asyncpg.Connection, schedule_id: str, *, lock: bool = False) -> ScheduleRow | None:
    row = await conn.fetchrow(
        f"SELECT {_SCHEDULE}, template::text AS template FROM gateway.schedules WHERE schedule_id = $1"
        + (" FOR UPDATE" if lock else ""),
        schedule_id,
    )
    return _schedule(row) if row else None


async def find_by_key(conn: asyncpg.Connection, created_by: str, key: str) -> ScheduleRow | None:
    row = await conn.fetchrow(
        f"""SELECT {_SCHEDULE}, template::text AS template FROM gateway.schedules
            WHERE created_by = $1 AND idempotency_key = $2""",
        created_by,
        key,
    )
    return _schedule(row) if row else None


async def listed(conn: asyncpg.Connection, created_by: str | None) -> list[ScheduleRow]:
    """Every schedule not deleted (``created_by``'s only, when given), newest first."""
    rows = await conn.fetch(
        f"""SELECT {_SCHEDULE}, template::text AS template FROM gateway.schedules
            WHERE state <> '{DELETED}' AND ($1::text IS NULL OR created_by = $1)
            ORDER BY created_at DESC LIMIT 500""",
        created_by,
    )
    return [_schedule(r) for r in rows]


async def runs(conn: asyncpg.Connection, schedule_id: str, limit: int = RUNS_SHOWN) -> list[RunRow]:
    rows = await conn.fetch(
        """SELECT schedule_id, due_at, kind, status, workflow_id, detail, at FROM gateway.schedule_runs
           WHERE schedule_id = $1 ORDER BY due_at DESC LIMIT $2""",
        schedule_id,
        limit,
    )
    return [RunRow(**dict(r)) for r in rows]


@dataclass(frozen=True)
class ChangeRow:
    at: datetime
    by: str
    action: str


async def changed(conn: asyncpg.Connection, schedule_id: str, by: str, action: str, now: datetime) -> None:
    """Who did what to the schedule, when (its audit trail)."""
    await conn.execute(
        "INSERT INTO gateway.schedule_changes (schedule_id, at, by, action) VALUES ($1, $2, $3, $4)",
        schedule_id,
        now,
        by,
        action,
    )


async def changes(conn: asyncpg.Connection, schedule_id: str, limit: int = RUNS_SHOWN) -> list[ChangeRow]:
    rows = await conn.fetch(
        """SELECT at, by, action FROM gateway.schedule_changes WHERE schedule_id = $1
           ORDER BY at DESC, seq DESC LIMIT $2""",
        schedule_id,
        limit,
    )
    return [ChangeRow(**dict(r)) for r in rows]


async def set_state(conn: asyncpg.Connection, schedule_id: str, state: str, now: datetime) -> None:
    """Pause, resume or delete (the caller holds the schedule's row: see find(lock=True)). A
    deleted schedule stays deleted. Pausing or deleting skips the runs due and not started;
    a resumed schedule owes nothing for its pause: its runs count from now (none is caught
    up), and its next timer is armed afresh."""
    found = await find(conn, schedule_id, lock=True)
    if found is None or found.state == DELETED:
        return
    if state == ACTIVE:
        await conn.execute(
            """UPDATE gateway.schedules SET state = $2, last_due_at = $3, next_due_at = $4, armed_for = NULL
               WHERE schedule_id = $1""",
            schedule_id,
            state,
            now,
            next_due(found.cadence, now),
        )
        return
    await conn.execute("UPDATE gateway.schedules SET state = $2 WHERE schedule_id = $1", schedule_id, state)
    await conn.execute(
        f"""UPDATE gateway.schedule_runs SET status = '{SKIPPED}', at = $2, detail = $3
            WHERE schedule_id = $1 AND status IN ('{DUE}', '{BUFFERED}')""",
        schedule_id,
        now,
        f"the schedule was {state}",
    )


async def add_run(
    conn: asyncpg.Connection, schedule_id: str, due_at: datetime, kind: str, now: datetime
) -> bool:
    """A run due now (a person's trigger); False when one is recorded for that instant."""
    added = await conn.fetchval(
        f"""INSERT INTO gateway.schedule_runs (schedule_id, due_at, kind, status, not_before)
            VALUES ($1, $2, $3, '{DUE}', $4) ON CONFLICT DO NOTHING RETURNING 1""",
        schedule_id,
        due_at,
        kind,
        now,
    )
    return added is not None


@dataclass(frozen=True)
class RecordDue:
    """The effect of a schedule's timer falling due, in the transaction of its inbox row:
    the runs due since the last one recorded (those older than the catch-up window missed),
    and the next run's time. A paused or deleted schedule records nothing; a timer armed
    for a time already recorded (a second timer, a resume) records nothing either."""

    schedule_id: str
    due_at: datetime
    now: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        found = await find(conn, self.schedule_id, lock=True)
        if found is None or found.state != ACTIVE:
            return
        until = max(self.now, self.due_at)
        caught = catch_up(found.cadence, found.last_due_at, until, timedelta(seconds=found.catchup_window_s))
        latest = caught.started[-1] if caught.started else None
        for due in caught.started:
            kind = "scheduled" if due == latest else "catch_up"
            await add_run(conn, self.schedule_id, due, kind, self.now)
        await _missed(conn, self.schedule_id, caught.missed, caught.missed_count, self.now)
        await conn.execute(
            """UPDATE gateway.schedules SET last_due_at = $2, next_due_at = $3 WHERE schedule_id = $1""",
            self.schedule_id,
            until,
            next_due(found.cadence, until),
        )


async def _missed(
    conn: asyncpg.Connection, schedule_id: str, missed: Sequence[datetime], count: int, now: datetime
) -> None:
    """Missed runs, each a row (at most MISSED_LISTED: the newest of those enumerated); the
    oldest row says how many more there were."""
    listed_ = list(missed[-MISSED_LISTED:])
    for due in listed_:
        await conn.execute(
            f"""INSERT INTO gateway.schedule_runs (schedule_id, due_at, kind, status, detail, at, not_before)
                VALUES ($1, $2, 'catch_up', '{MISSED}', 'older than the catch-up window', $3, $3)
                ON CONFLICT DO NOTHING""",
            schedule_id,
            due,
            now,
        )
    if count > len(listed_):
        await conn.execute(
            f"""UPDATE gateway.schedule_runs SET detail = $3 WHERE schedule_id = $1 AND due_at = $2
                AND status = '{MISSED}'""",
            schedule_id,
            listed_[0],
            f"older than the catch-up window, as were {count - len(listed_)} runs before it",
        )


# -- what the worker takes --------------------------------------------------------------------


async def to_arm(conn: asyncpg.Connection) -> ScheduleRow | None:
    """An active schedule whose next run has no timer yet (locked: one worker arms it)."""
    row = await conn.fetchrow(
        f"""SELECT {_SCHEDULE}, template::text AS template FROM gateway.schedules
            WHERE state = '{ACTIVE}' AND next_due_at IS NOT NULL AND armed_for IS DISTINCT FROM next_due_at
            LIMIT 1 FOR UPDATE SKIP LOCKED"""
    )
    return _schedule(row) if row else None


async def armed(conn: asyncpg.Connection, schedule_id: str, due_at: datetime) -> None:
    await conn.execute(
        "UPDATE gateway.schedules SET armed_for = $2 WHERE schedule_id = $1", schedule_id, due_at
    )


async def next_run(conn: asyncpg.Connection, now: datetime) -> RunRow | None:
    """The oldest run to act on now (due, or buffered and due to be looked at again) of an
    active schedule; it and its schedule locked, so replicas take different ones. One whose
    schedule someone changes right now is passed over (no waiting on the other's locks: the
    API locks the schedule, then its runs)."""
    row = await conn.fetchrow(
        f"""SELECT r.schedule_id, r.due_at, r.kind, r.status, r.workflow_id, r.detail, r.at
            FROM gateway.schedule_runs r JOIN gateway.schedules s USING (schedule_id)
            WHERE r.status IN ('{DUE}', '{BUFFERED}') AND r.not_before <= $1 AND s.state = '{ACTIVE}'
            ORDER BY r.not_before, r.due_at LIMIT 1 FOR UPDATE OF s, r SKIP LOCKED""",
        now,
    )
    return RunRow(**dict(row)) if row else None


async def latest_started(conn: asyncpg.Connection, schedule_id: str) -> RunRow | None:
    row = await conn.fetchrow(
        f"""SELECT schedule_id, due_at, kind, status, workflow_id, detail, at FROM gateway.schedule_runs
            WHERE schedule_id = $1 AND status = '{STARTED}' ORDER BY due_at DESC LIMIT 1""",
        schedule_id,
    )
    return RunRow(**dict(row)) if row else None


async def buffered_other(conn: asyncpg.Connection, run: RunRow) -> bool:
    """Whether another run of the schedule waits buffered (buffer_one keeps one)."""
    found = await conn.fetchval(
        f"""SELECT 1 FROM gateway.schedule_runs WHERE schedule_id = $1 AND status = '{BUFFERED}'
            AND due_at <> $2""",
        run.schedule_id,
        run.due_at,
    )
    return found is not None


async def settle(
    conn: asyncpg.Connection,
    run: RunRow,
    status: str,
    *,
    now: datetime,
    workflow_id: str | None = None,
    detail: str | None = None,
    look_again_at: datetime | None = None,
) -> None:
    await conn.execute(
        """UPDATE gateway.schedule_runs SET status = $3, workflow_id = $4, detail = $5, at = $6,
               not_before = COALESCE($7, not_before)
           WHERE schedule_id = $1 AND due_at = $2""",
        run.schedule_id,
        run.due_at,
        status,
        workflow_id,
        detail,
        now,
        look_again_at,
    )
