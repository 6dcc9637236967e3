"""The ``deadletter_service`` tables: letters, and the operations done on them.

``letters`` holds one row per dead letter (keyed by the dead letter's own event
id, so a redelivered ``event.dead_lettered`` is stored once) with everything
needed to inspect and redrive it: original bytes, key, headers, the error and
every failure. ``operations`` is the audit trail: every redrive and discard,
refused ones included, with who, why and when.

The runtime's own tables (inbox, state, outbox, parked) live in the same schema;
these names do not collide with them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from chorus.base import migrations
from chorus.base.db import rows_affected
from chorus.kernel.service import DataRequest, ErasedAsRetired
from chorus.platform.deadletter_service.domain import OPEN, LetterFilter

SCHEMA = "deadletter_service"

DDL = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.letters (
        id uuid PRIMARY KEY,
        status text NOT NULL,
        dead_lettered_at timestamptz NOT NULL,
        received_at timestamptz NOT NULL,
        service text NOT NULL,
        service_version text NOT NULL,
        consumer_group text NOT NULL,
        original_topic text NOT NULL,
        original_partition int NOT NULL,
        original_offset bigint NOT NULL,
        original_key bytea,
        original_value bytea NOT NULL,
        original_headers jsonb NOT NULL,
        original_timestamp_ms bigint,
        error_category text NOT NULL,
        error_class text NOT NULL,
        error_message text NOT NULL,
        error_traceback text NOT NULL,
        error_pointer text,
        attempts int NOT NULL,
        failures jsonb NOT NULL,
        original_event_type text,
        original_event_id text,
        original_workflow_id text,
        envelope jsonb NOT NULL,
        resolved_at timestamptz,
        resolved_by text)""",
    # The depth gauge and "what is open for service X" read only open letters.
    f"""CREATE INDEX IF NOT EXISTS letters_open
        ON {SCHEMA}.letters (service, error_category, dead_lettered_at) WHERE status = '{OPEN}'""",
    f"CREATE INDEX IF NOT EXISTS letters_by_time ON {SCHEMA}.letters (dead_lettered_at DESC, id)",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.operations (
        id bigserial PRIMARY KEY,
        op text NOT NULL,
        letter_id uuid NOT NULL,
        actor text NOT NULL,
        reason text NOT NULL,
        at timestamptz NOT NULL,
        result text NOT NULL,
        detail jsonb NOT NULL DEFAULT '{{}}')""",
    f"CREATE INDEX IF NOT EXISTS operations_by_letter ON {SCHEMA}.operations (letter_id, id)",
]


MIGRATIONS = [
    *migrations.baseline(DDL),
    migrations.Migration(
        2,
        "by_workflow",
        (f"CREATE INDEX IF NOT EXISTS letters_by_workflow ON {SCHEMA}.letters (original_workflow_id)",),
    ),
    # An operator's request (workflow.redrive_requested, stated by the gateway) to redrive a
    # workflow's open letters: stored with its inbox row, done by the redrive worker.
    migrations.Migration(
        3,
        "redrive_requests",
        (
            f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.redrive_requests (
                request_id uuid PRIMARY KEY,
                workflow_id text NOT NULL,
                requested_by text NOT NULL,
                reason text NOT NULL,
                requested_at timestamptz NOT NULL,
                retry_at timestamptz,
                done_at timestamptz,
                redriven int,
                refused int)""",
            f"""CREATE INDEX IF NOT EXISTS redrive_requests_pending
                ON {SCHEMA}.redrive_requests (requested_at) WHERE done_at IS NULL""",
            f"""CREATE INDEX IF NOT EXISTS redrive_requests_by_workflow
                ON {SCHEMA}.redrive_requests (workflow_id)""",
        ),
    ),
]


async def migrate(conn: asyncpg.Connection) -> None:
    await migrations.migrate(conn, schema=SCHEMA, component="letters", migrations=MIGRATIONS)


@dataclass(frozen=True)
class LetterRetention(ErasedAsRetired):
    """A retired workflow's dead letters go with it (their original bytes carry its data),
    and the operations on them (an operator's reasons). On their own: a resolved letter
    (redriven or discarded) ``keep_resolved_s`` after its resolution; a letter no workflow
    owns (a poison record, read by position) ``keep_unowned_s`` after it arrived, resolved
    or not, since no retirement will ever reach it."""

    keep_resolved_s: float = 30 * 86400.0
    keep_unowned_s: float = 30 * 86400.0

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        letters = await conn.fetch(
            f"""DELETE FROM {SCHEMA}.letters
                WHERE (status <> '{OPEN}' AND resolved_at < $1)
                   OR (original_workflow_id IS NULL AND dead_lettered_at < $2)
                RETURNING id""",
            now - timedelta(seconds=self.keep_resolved_s),
            now - timedelta(seconds=self.keep_unowned_s),
        )
        ops = await conn.execute(
            f"DELETE FROM {SCHEMA}.operations WHERE letter_id = ANY($1::uuid[])", [r["id"] for r in letters]
        )
        return {f"{SCHEMA}.letters": len(letters), f"{SCHEMA}.operations": rows_affected(ops)}

    async def retire(
        self, conn: asyncpg.Connection, workflow_ids: Sequence[str], request: DataRequest
    ) -> dict[str, int]:
        letters = await conn.fetch(
            f"DELETE FROM {SCHEMA}.letters WHERE original_workflow_id = ANY($1::text[]) RETURNING id",
            list(workflow_ids),
        )
        ops = await conn.execute(
            f"DELETE FROM {SCHEMA}.operations WHERE letter_id = ANY($1::uuid[])", [r["id"] for r in letters]
        )
        asked = await conn.execute(
            f"DELETE FROM {SCHEMA}.redrive_requests WHERE workflow_id = ANY($1::text[])", list(workflow_ids)
        )
        return {
            f"{SCHEMA}.letters": len(letters),
            f"{SCHEMA}.operations": rows_affected(ops),
            f"{SCHEMA}.redrive_requests": rows_affected(asked),
        }


@dataclass(frozen=True)
class AskRedrive:
    """An operator's request to redrive a workflow's open letters, stored once (its event id)
    with the request's inbox row; the redrive worker does it."""

    request_id: uuid.UUID
    workflow_id: str
    requested_by: str
    reason: str
    requested_at: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"""INSERT INTO {SCHEMA}.redrive_requests
                  (request_id, workflow_id, requested_by, reason, requested_at)
                VALUES ($1, $2, $3, $4, $5) ON CONFLICT (request_id) DO NOTHING""",
            self.request_id,
            self.workflow_id,
            self.requested_by,
            self.reason,
            self.requested_at,
        )


@dataclass(frozen=True)
class RedriveRequest:
    request_id: uuid.UUID
    workflow_id: str
    requested_by: str
    reason: str
    requested_at: datetime


async def next_redrive_request(conn: asyncpg.Connection, now: datetime) -> RedriveRequest | None:
    """The oldest request not done yet and due (``now``), locked for this transaction
    (replicas skip it)."""
    row = await conn.fetchrow(
        f"""SELECT request_id, workflow_id, requested_by, reason, requested_at
            FROM {SCHEMA}.redrive_requests
            WHERE done_at IS NULL AND (retry_at IS NULL OR retry_at <= $1)
            ORDER BY requested_at, request_id LIMIT 1 FOR UPDATE SKIP LOCKED""",
        now,
    )
    return RedriveRequest(**dict(row)) if row is not None else None


async def redrive_request_later(conn: asyncpg.Connection, request_id: uuid.UUID, at: datetime) -> None:
    await conn.execute(
        f"UPDATE {SCHEMA}.redrive_requests SET retry_at = $2 WHERE request_id = $1", request_id, at
    )


async def redrive_request_done(
    conn: asyncpg.Connection, request_id: uuid.UUID, at: datetime, redriven: int, refused: int
) -> None:
    await conn.execute(
        f"""UPDATE {SCHEMA}.redrive_requests SET done_at = $2, redriven = $3, refused = $4
            WHERE request_id = $1""",
        request_id,
        at,
        redriven,
        refused,
    )


@dataclass(frozen=True)
class LetterContent:
    """What one dead letter holds: the ``event.dead_lettered`` payload, in columns."""

    id: uuid.UUID
    dead_lettered_at: datetime
    received_at: datetime
    service: str
    service_version: str
    consumer_group: str
    original_topic: str
    original_partition: int
    original_offset: int
    original_key: bytes | None
    original_value: bytes
    original_headers: list[dict[str, str | None]]
    original_timestamp_ms: int | None
    error_category: str
    error_class: str
    error_message: str
    error_traceback: str
    error_pointer: str | None
    attempts: int
    failures: list[dict[str, Any]]
    original_event_type: str | None
    original_event_id: str | None
    original_workflow_id: str | None
    envelope: dict[str, Any]


@dataclass(frozen=True)
class StoreLetter(LetterContent):
    """Insert one open letter. An existing id wins: a redelivery changes nothing,
    in particular not the status an operator has set since."""

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"""INSERT INTO {SCHEMA}.letters
                  (id, status, dead_lettered_at, received_at, service, service_version,
                   consumer_group, original_topic, original_partition, original_offset,
                   original_key, original_value, original_headers, original_timestamp_ms,
                   error_category, error_class, error_message, error_traceback, error_pointer,
                   attempts, failures, original_event_type, original_event_id,
                   original_workflow_id, envelope)
                VALUES ($1, '{OPEN}', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13,
                        $14, $15, $16, $17, $18, $19, $20::jsonb, $21, $22, $23, $24::jsonb)
                ON CONFLICT (id) DO NOTHING""",
            self.id, self.dead_lettered_at, self.received_at, self.service,
            self.service_version, self.consumer_group, self.original_topic,
            self.original_partition, self.original_offset, self.original_key,
            self.original_value, json.dumps(self.original_headers), self.original_timestamp_ms,
            self.error_category, self.error_class, self.error_message, self.error_traceback,
            self.error_pointer, self.attempts, json.dumps(self.failures),
            self.original_event_type, self.original_event_id, self.original_workflow_id,
            json.dumps(self.envelope),
        )  # fmt: skip


@dataclass(frozen=True)
class Letter(LetterContent):
    """A stored letter: its content, and where an operator has taken it."""

    status: str
    resolved_at: datetime | None
    resolved_by: str | None


_LETTER_COLUMNS = """id, status, dead_lettered_at, received_at, service, service_version,
    consumer_group, original_topic, original_partition, original_offset, original_key,
    original_value, original_headers::text AS original_headers, original_timestamp_ms,
    error_category, error_class, error_message, error_traceback, error_pointer, attempts,
    failures::text AS failures, original_event_type, original_event_id, original_workflow_id,
    envelope::text AS envelope, resolved_at, resolved_by"""

_JSON_COLUMNS = ("original_headers", "failures", "envelope")


def _letter(row: asyncpg.Record) -> Letter:
    values = dict(row)
    for column in _JSON_COLUMNS:
        values[column] = json.loads(values[column])
    return Letter(**values)


def _where(f: LetterFilter) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (
        ("service", f.service),
        ("original_workflow_id", f.workflow_id),
        ("error_category", f.category),
        ("original_event_type", f.event_type),
        ("status", f.status),
    ):
        if value is not None:
            args.append(value)
            clauses.append(f"{column} = ${len(args)}")
    if f.since is not None:
        args.append(f.since)
        clauses.append(f"dead_lettered_at >= ${len(args)}")
    if f.until is not None:
        args.append(f.until)
        clauses.append(f"dead_lettered_at < ${len(args)}")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", args


async def list_letters(conn: asyncpg.Connection, f: LetterFilter) -> list[Letter]:
    """Newest first."""
    where, args = _where(f)
    rows = await conn.fetch(
        f"""SELECT {_LETTER_COLUMNS} FROM {SCHEMA}.letters{where}
            ORDER BY dead_lettered_at DESC, id LIMIT {int(f.limit)}""",
        *args,
    )
    return [_letter(r) for r in rows]


async def lock_open_letters(conn: asyncpg.Connection, f: LetterFilter) -> list[Letter]:
    """Open letters matching ``f``, oldest first, locked for this transaction.

    Rows another transaction holds are skipped, not waited for: a concurrent
    redrive of the same letter resolves it, and this one must not publish it again.
    """
    where, args = _where(replace(f, status=OPEN))
    rows = await conn.fetch(
        f"""SELECT {_LETTER_COLUMNS} FROM {SCHEMA}.letters{where}
            ORDER BY dead_lettered_at, id LIMIT {int(f.limit)} FOR UPDATE SKIP LOCKED""",
        *args,
    )
    return [_letter(r) for r in rows]


async def get_letter(
    conn: asyncpg.Connection, letter_id: uuid.UUID, *, for_update: bool = False
) -> Letter | None:
    row = await conn.fetchrow(
        f"SELECT {_LETTER_COLUMNS} FROM {SCHEMA}.letters WHERE id = $1"
        + (" FOR UPDATE" if for_update else ""),
        letter_id,
    )
    return _letter(row) if row is not None else None


async def set_status(
    conn: asyncpg.Connection, letter_id: uuid.UUID, status: str, actor: str, now: datetime
) -> None:
    await conn.execute(
        f"""UPDATE {SCHEMA}.letters SET status = $2, resolved_at = $3, resolved_by = $4
            WHERE id = $1""",
        letter_id, status, now, actor,
    )  # fmt: skip


@dataclass(frozen=True)
class OperationRow:
    id: int
    op: str
    letter_id: uuid.UUID
    actor: str
    reason: str
    at: datetime
    result: str
    detail: dict[str, Any]


_OPERATION_COLUMNS = "id, op, letter_id, actor, reason, at, result, detail::text AS detail"


def _operation(row: asyncpg.Record) -> OperationRow:
    values = dict(row)
    values["detail"] = json.loads(values["detail"])
    return OperationRow(**values)


async def add_operation(
    conn: asyncpg.Connection,
    *,
    op: str,
    letter_id: uuid.UUID,
    actor: str,
    reason: str,
    at: datetime,
    result: str,
    detail: dict[str, Any],
) -> OperationRow:
    row = await conn.fetchrow(
        f"""INSERT INTO {SCHEMA}.operations (op, letter_id, actor, reason, at, result, detail)
            VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)
            RETURNING {_OPERATION_COLUMNS}""",
        op, letter_id, actor, reason, at, result, json.dumps(detail),
    )  # fmt: skip
    assert row is not None
    return _operation(row)


async def list_operations(
    conn: asyncpg.Connection,
    *,
    letter_id: uuid.UUID | None = None,
    op: str | None = None,
    actor: str | None = None,
    limit: int = 100,
) -> list[OperationRow]:
    """Newest first."""
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (("letter_id", letter_id), ("op", op), ("actor", actor)):
        if value is not None:
            args.append(value)
            clauses.append(f"{column} = ${len(args)}")
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    rows = await conn.fetch(
        f"""SELECT {_OPERATION_COLUMNS} FROM {SCHEMA}.operations{where}
            ORDER BY id DESC LIMIT {int(limit)}""",
        *args,
    )
    return [_operation(r) for r in rows]


@dataclass(frozen=True)
class Group:
    service: str
    category: str
    status: str
    count: int
    oldest: datetime
    newest: datetime


async def groups(conn: asyncpg.Connection, f: LetterFilter) -> list[Group]:
    """Letter counts by service, error category and status (the triage view)."""
    where, args = _where(f)
    rows = await conn.fetch(
        f"""SELECT service, error_category AS category, status, count(*) AS count,
                   min(dead_lettered_at) AS oldest, max(dead_lettered_at) AS newest
            FROM {SCHEMA}.letters{where}
            GROUP BY service, error_category, status
            ORDER BY count(*) DESC, service, error_category, status""",
        *args,
    )
    return [Group(**dict(r)) for r in rows]


@dataclass(frozen=True)
class OpenDepth:
    service: str
    category: str
    count: int
    oldest: datetime


async def open_depth(conn: asyncpg.Connection) -> list[OpenDepth]:
    rows = await conn.fetch(
        f"""SELECT service, error_category AS category, count(*) AS count,
                   min(dead_lettered_at) AS oldest
            FROM {SCHEMA}.letters WHERE status = '{OPEN}'
            GROUP BY service, error_category"""
    )
    return [OpenDepth(**dict(r)) for r in rows]
