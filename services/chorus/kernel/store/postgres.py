"""The service's own tables on PostgreSQL: the schema, its SQL, and :class:`PgStore`, the
record path's :class:`~chorus.kernel.store.Store` on a connection pool.

Every service owns a PostgreSQL schema named after it; nothing outside the service reads
these tables (the gateway reads the audit projection instead). Deployed, each service
connects as a role of its name that owns the schema and can reach no other
(chorus.tools.dbroles), so the rule is the database's, not only the code's. Besides the
record path's tables (``chorus.kernel.store``) the schema has ``archive``: rows removed
at a workflow's retirement in archive mode.

:class:`ServiceStore` methods take a connection, so callers own transactions: the
feature packages (erasure and retention, moving a workflow between releases) and code
that publishes outside handlers (``chorus.kernel.outbox.OutboxWriter``) write here in
transactions of their own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from chorus.base.db import data_error_blames_input, ident, is_data_error, rows_affected
from chorus.base.errors import RefusedByStoreError
from chorus.base.faults import fault_point
from chorus.base.migrations import Migration, baseline, migrate
from chorus.kernel.records import Record
from chorus.kernel.service import Effect
from chorus.kernel.store import (
    Checkpoint,
    CheckpointWrite,
    Claim,
    ConflictError,
    InboxOutcome,
    InboxRow,
    Loaded,
    OutboxMessage,
    OutboxRow,
    ParkedRow,
    StateRow,
    StepWrite,
)

HANDED_OVER = ", ".join(f"'{o}'" for o in InboxOutcome.handed_over())


SUBJECT_HASH_FUNCTION = """
CREATE OR REPLACE FUNCTION chorus.subject_hash(ref text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT 'sha256:' || encode(sha256(convert_to(ref, 'UTF8')), 'hex')
$$
"""
"""How an erasure request names its subject (subject.erasure_requested carries only the
hash, never the reference). IMMUTABLE so that it can be indexed: convert_to to UTF-8 gives
the same bytes for the life of a database."""

# Raised inside the step statement to undo its inbox and outbox writes when the
# checkpoint moved (SQLSTATE 40001, so it reads as the serialization conflict it is).
CONFLICT_FUNCTION = """
CREATE OR REPLACE FUNCTION chorus.step_conflict(what text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'chorus step conflict: %', what USING ERRCODE = '40001';
END $$"""


async def migrate_shared(conn: asyncpg.Connection) -> None:
    """The objects every service shares, in schema chorus. Its ledger's lock keeps services
    that start together from running CREATE OR REPLACE FUNCTION at once; where services
    run as their own roles, the provisioning admin runs this first (a role could not
    replace a function another one created)."""
    shared = [*baseline([CONFLICT_FUNCTION]), Migration(2, "subject hash", (SUBJECT_HASH_FUNCTION,))]
    await migrate(conn, schema="chorus", component="runtime", migrations=shared)


def _columns(rows: Sequence[Any], *fields: str) -> list[list[Any]]:
    """The rows' values of each field, one list per field: a batch's arrays for unnest()."""
    return [[getattr(row, f) for row in rows] for f in fields]


def _encode_headers(headers: Sequence[tuple[str, bytes]]) -> str:
    return json.dumps([[k, v.hex()] for k, v in headers])


def _decode_headers(raw: str | None) -> list[tuple[str, bytes]]:
    return [(k, bytes.fromhex(v)) for k, v in json.loads(raw or "[]")]


def archive_ddl(s: str) -> list[str]:
    """The archive table of schema ``s``: archived rows of any table, as jsonb. Every
    service has one (the runtime archives its own rows at retirement); the audit
    projector's ledger created the same table first, with these very statements."""
    return [
        f"""CREATE TABLE IF NOT EXISTS {s}.archive (
            id bigserial PRIMARY KEY,
            run_id uuid NOT NULL,
            source text NOT NULL,
            workflow_id text NOT NULL,
            subject_ref text,
            row jsonb NOT NULL,
            archived_at timestamptz NOT NULL)""",
        f"CREATE INDEX IF NOT EXISTS archive_workflow ON {s}.archive (workflow_id)",
        f"CREATE INDEX IF NOT EXISTS archive_subject ON {s}.archive (subject_ref)",
    ]


class ServiceStore:
    """SQL for one service's schema. Methods take a connection so callers own transactions."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.schema = ident(service)

    def ddl(self) -> list[str]:
        s = self.schema
        return [
            f"CREATE SCHEMA IF NOT EXISTS {s}",
            f"""CREATE TABLE IF NOT EXISTS {s}.inbox (
                consumer_group text NOT NULL,
                event_id uuid NOT NULL,
                attempt int NOT NULL,
                outcome text NOT NULL,
                event_type text,
                workflow_id text,
                processed_at timestamptz NOT NULL,
                PRIMARY KEY (consumer_group, event_id))""",
            f"""CREATE TABLE IF NOT EXISTS {s}.state (
                workflow_id text PRIMARY KEY,
                workflow_type text NOT NULL,
                state jsonb,
                state_version int NOT NULL,
                revision bigint NOT NULL,
                parked_on uuid,
                subject_ref text,
                created_at timestamptz NOT NULL,
                updated_at timestamptz NOT NULL)""",
            f"""CREATE TABLE IF NOT EXISTS {s}.outbox (
                id bigserial PRIMARY KEY,
                topic text NOT NULL,
                key bytea,
                value bytea NOT NULL,
                headers jsonb NOT NULL DEFAULT '[]',
                event_id uuid,
                workflow_id text,
                created_at timestamptz NOT NULL DEFAULT now(),
                dispatched_at timestamptz)""",
            # A row the broker refused (record too large, invalid record) is set aside,
            # dead-lettered with its bytes, and kept here: it never blocks the rows behind it.
            f"ALTER TABLE {s}.outbox ADD COLUMN IF NOT EXISTS failed_at timestamptz",
            f"ALTER TABLE {s}.outbox ADD COLUMN IF NOT EXISTS failure text",
            # The relay scans only undispatched rows; this keeps that scan small
            # however many dispatched rows wait for the janitor.
            f"CREATE INDEX IF NOT EXISTS outbox_pending ON {s}.outbox (id) WHERE dispatched_at IS NULL",
            # Retention and erasure delete one workflow's rows across every service.
            f"CREATE INDEX IF NOT EXISTS inbox_by_workflow ON {s}.inbox (workflow_id)",
            f"CREATE INDEX IF NOT EXISTS outbox_by_workflow ON {s}.outbox (workflow_id)",
            f"""CREATE TABLE IF NOT EXISTS {s}.parked (
                id bigserial PRIMARY KEY,
                workflow_id text NOT NULL,
                topic text NOT NULL,
                partition int NOT NULL,
                "offset" bigint NOT NULL,
                key bytea,
                value bytea NOT NULL,
                headers jsonb NOT NULL DEFAULT '[]',
                attempt int NOT NULL,
                timestamp_ms bigint,
                parked_at timestamptz NOT NULL)""",
            f"CREATE INDEX IF NOT EXISTS parked_by_workflow ON {s}.parked (workflow_id, id)",
        ]

    async def migrate(self, conn: asyncpg.Connection) -> None:
        await migrate_shared(conn)
        await migrate(conn, schema=self.schema, component="runtime", migrations=self.migrations())

    def migrations(self) -> list[Migration]:
        s = self.schema
        archive = Migration(
            2,
            "archive",
            (
                *archive_ddl(s),
                f"""CREATE INDEX IF NOT EXISTS archive_subject_hash ON {s}.archive
                    (chorus.subject_hash(subject_ref)) WHERE subject_ref IS NOT NULL""",
                f"""CREATE INDEX IF NOT EXISTS state_subject ON {s}.state
                    (chorus.subject_hash(subject_ref)) WHERE subject_ref IS NOT NULL""",
            ),
        )
        ended = Migration(3, "state_ended", (f"ALTER TABLE {s}.state ADD COLUMN IF NOT EXISTS ended text",))
        release = Migration(
            4, "state_release", (f"ALTER TABLE {s}.state ADD COLUMN IF NOT EXISTS release text",)
        )
        repinned = Migration(
            5,
            "state_repinned_from",
            (f"ALTER TABLE {s}.state ADD COLUMN IF NOT EXISTS repinned_from text[]",),
        )
        history = Migration(
            6,
            "state_history",
            (
                # Every revision of every checkpoint, and the step that wrote it: a reset from
                # a step rolls the checkpoint back to the revision before it and reads the
                # event again from where it was (topic, partition, offset).
                f"""CREATE TABLE IF NOT EXISTS {s}.state_history (
                    workflow_id text NOT NULL,
                    revision bigint NOT NULL,
                    event_id uuid,
                    event_type text,
                    topic text,
                    partition int,
                    "offset" bigint,
                    state jsonb,
                    state_version int NOT NULL,
                    parked_on uuid,
                    ended text,
                    at timestamptz NOT NULL,
                    PRIMARY KEY (workflow_id, revision))""",
            ),
        )
        rerun = Migration(
            7,
            "state_rerun",
            (
                f"ALTER TABLE {s}.state ADD COLUMN IF NOT EXISTS rerun text",
                f"ALTER TABLE {s}.state ADD COLUMN IF NOT EXISTS rerun_point uuid",
            ),
        )
        undone = Migration(
            8,
            "state_history_undone",
            # The reset that rolled a revision back: it stays, as what happened before it.
            (f"ALTER TABLE {s}.state_history ADD COLUMN IF NOT EXISTS undone_by text",),
        )
        return [*baseline(self.ddl()), archive, ended, release, repinned, history, rerun, undone]

    # -- reads ---------------------------------------------------------------------

    async def load_many(
        self, conn: asyncpg.Connection, group: str, keys: Sequence[tuple[uuid.UUID, str]]
    ) -> list[Loaded]:
        """Inbox row, checkpoint and "has parked records" for many (event id, workflow id)
        pairs in one round trip, in order."""
        s = self.schema
        rows = await conn.fetch(
            f"""SELECT t.n, i.outcome, i.attempt,
                       st.state::text AS state, st.state_version, st.revision, st.parked_on, st.ended,
                       st.release, st.repinned_from, st.rerun, st.rerun_point,
                       EXISTS (SELECT 1 FROM {s}.parked p WHERE p.workflow_id = t.wf) AS has_parked,
                       st.repinned_from IS NOT NULL AND EXISTS (
                         SELECT 1 FROM {s}.inbox pi
                         WHERE pi.event_id = t.eid AND pi.consumer_group = ANY(st.repinned_from)
                           AND pi.outcome IN ({HANDED_OVER})) AS handled_before
                FROM unnest($2::uuid[], $3::text[]) WITH ORDINALITY AS t(eid, wf, n)
                LEFT JOIN {s}.inbox i ON i.consumer_group = $1 AND i.event_id = t.eid
                LEFT JOIN {s}.state st ON st.workflow_id = t.wf
                ORDER BY t.n""",
            group,
            [k[0] for k in keys],
            [k[1] for k in keys],
        )
        return [self._loaded(row) for row in rows]

    @staticmethod
    def _loaded(row: Any) -> Loaded:
        inbox = InboxRow(InboxOutcome(row["outcome"]), row["attempt"]) if row["outcome"] is not None else None
        state = None
        if row["revision"] is not None:
            state = StateRow(
                json.loads(row["state"]) if row["state"] is not None else None,
                row["state_version"],
                row["revision"],
                row["parked_on"],
                row["ended"],
                row["release"],
                tuple(row["repinned_from"] or ()),
                row["rerun"],
                row["rerun_point"],
            )
        return Loaded(inbox, state, row["has_parked"], bool(row["handled_before"]))

    # -- the handling transaction -----------------------------------------------------

    async def claim_inbox(self, conn: asyncpg.Connection, claim: Claim, *, from_parked: bool = False) -> bool:
        """Record the event's outcome; False when it was already finished (a duplicate).

        A row that says retrying / dead-lettered lets a later attempt through (a
        durable retry or a redrive); a parked row lets the drain through once.
        """
        row = await conn.fetchrow(
            f"""INSERT INTO {self.schema}.inbox AS i
                  (consumer_group, event_id, attempt, outcome, event_type, workflow_id, processed_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7)
                ON CONFLICT (consumer_group, event_id) DO UPDATE
                  SET attempt = EXCLUDED.attempt, outcome = EXCLUDED.outcome,
                      processed_at = EXCLUDED.processed_at
                  WHERE (i.outcome IN ('{InboxOutcome.RETRYING}', '{InboxOutcome.DEAD_LETTERED}')
                         AND i.attempt < EXCLUDED.attempt)
                     OR (i.outcome = '{InboxOutcome.PARKED}' AND $8)
                RETURNING 1""",
            claim.group,
            claim.event_id,
            claim.attempt,
            claim.outcome,
            claim.event_type,
            claim.workflow_id,
            claim.now,
            from_parked,
        )
        return row is not None

    async def write_state(self, conn: asyncpg.Connection, c: Checkpoint) -> int:
        """Write the checkpoint if nobody moved it since ``expected_revision``; returns the new
        revision. A first checkpoint is pinned to ``release``."""
        body = json.dumps(c.state) if c.state is not None else None
        if c.expected_revision is None:
            revision = await conn.fetchval(
                f"""INSERT INTO {self.schema}.state
                      (workflow_id, workflow_type, state, state_version, revision, parked_on,
                       subject_ref, created_at, updated_at, release)
                    VALUES ($1, $2, $3::jsonb, $4, 1, $5, $6, $7, $7, $8)
                    ON CONFLICT (workflow_id) DO NOTHING
                    RETURNING revision""",
                c.workflow_id,
                c.workflow_type,
                body,
                c.state_version,
                c.parked_on,
                c.subject_ref,
                c.now,
                c.release,
            )
        else:
            revision = await conn.fetchval(
                f"""UPDATE {self.schema}.state
                    SET state = $2::jsonb, state_version = $3, revision = revision + 1,
                        parked_on = $4, subject_ref = coalesce($5, subject_ref), updated_at = $6
                    WHERE workflow_id = $1 AND revision = $7
                    RETURNING revision""",
                c.workflow_id,
                body,
                c.state_version,
                c.parked_on,
                c.subject_ref,
                c.now,
                c.expected_revision,
            )
        if revision is None:
            raise ConflictError(f"workflow {c.workflow_id} changed concurrently")
        await self.keep_revision(conn, c.workflow_id, c.event_id, c.event_type)
        return int(revision)

    async def keep_revision(
        self, conn: asyncpg.Connection, workflow_id: str, event_id: uuid.UUID | None, event_type: str | None
    ) -> None:
        """The checkpoint as it stands now, into its history, as written by ``event_id``'s
        step (a mid-step checkpoint, a reset's rollback: writes outside the batched step)."""
        await conn.execute(
            f"""INSERT INTO {self.schema}.state_history
                  (workflow_id, revision, event_id, event_type, state, state_version, parked_on, ended, at)
                SELECT workflow_id, revision, $2, $3, state, state_version, parked_on, ended, updated_at
                FROM {self.schema}.state WHERE workflow_id = $1""",
            workflow_id,
            event_id,
            event_type,
        )

    async def add_outbox(self, conn: asyncpg.Connection, messages: Sequence[OutboxMessage]) -> None:
        if not messages:
            return
        await conn.executemany(
            f"""INSERT INTO {self.schema}.outbox (topic, key, value, headers, event_id, workflow_id)
                VALUES ($1, $2, $3, $4::jsonb, $5, $6)""",
            [
                (m.topic, m.key, m.value, _encode_headers(m.headers), m.event_id, m.workflow_id)
                for m in messages
            ],
        )

    async def commit_step(self, conn: asyncpg.Connection, write: StepWrite) -> list[OutboxRow]:
        return (await self.commit_steps(conn, [write]))[0]

    async def commit_steps(
        self, conn: asyncpg.Connection, writes: Sequence[StepWrite]
    ) -> list[list[OutboxRow]]:
        """Steps (of different workflows) in ONE statement: one round trip, atomic without
        BEGIN/COMMIT, all commit or none. Returns each write's outbox rows, with their ids.

        Every write is conditional on its inbox claim. A duplicate delivery or a
        checkpoint that moved since it was loaded aborts the whole statement with
        ConflictError; the caller then commits the steps one by one to find out which.
        """
        args = self._batch_args(writes)
        try:
            ids = await conn.fetchval(self._batch_sql, *args)
        except (
            asyncpg.SerializationError,
            asyncpg.CardinalityViolationError,
            asyncpg.UniqueViolationError,
        ) as exc:
            # A moved checkpoint, a duplicate, or one event (or workflow: its history row) twice
            # in the batch.
            raise ConflictError("a step of the batch conflicted") from exc
        # Ids are drawn in insertion order, which is the messages' order (ORDER BY u.n).
        ordered = iter(sorted(ids or ()))
        return [
            [
                OutboxRow(next(ordered), m.topic, m.key, m.value, list(m.headers), m.event_id)
                for m in w.messages
            ]
            for w in writes
        ]

    @property
    def _batch_sql(self) -> str:
        s = self.schema
        return f"""
        WITH items AS (
          SELECT * FROM unnest($1::text[], $2::uuid[], $3::int[], $4::text[], $5::text[], $6::text[],
                               $7::timestamptz[], $8::bool[], $9::text[], $10::text[], $11::int[],
                               $12::int[], $13::uuid[], $14::text[], $15::bigint[], $16::bigint[],
                               $25::text[], $26::text[], $27::text[], $28::int[], $29::bigint[])
            AS t(grp, event_id, attempt, outcome, event_type, workflow_id, at, from_parked,
                 workflow_type, state, state_version, mode, parked_on, subject_ref, rev, parked_id,
                 ended, release, src_topic, src_partition, src_offset)),
        claim AS (
          INSERT INTO {s}.inbox AS i
            (consumer_group, event_id, attempt, outcome, event_type, workflow_id, processed_at)
          SELECT grp, event_id, attempt, outcome, event_type, workflow_id, at FROM items
          ON CONFLICT (consumer_group, event_id) DO UPDATE
            SET attempt = EXCLUDED.attempt, outcome = EXCLUDED.outcome,
                processed_at = EXCLUDED.processed_at
            WHERE (i.outcome IN ('{InboxOutcome.RETRYING}', '{InboxOutcome.DEAD_LETTERED}')
                   AND i.attempt < EXCLUDED.attempt)
               OR (i.outcome = '{InboxOutcome.PARKED}' AND EXISTS (
                     SELECT 1 FROM items x WHERE x.event_id = EXCLUDED.event_id AND x.from_parked))
          RETURNING 1),
        first_state AS (
          INSERT INTO {s}.state (workflow_id, workflow_type, state, state_version, revision,
                                 parked_on, subject_ref, created_at, updated_at, ended, release)
          SELECT workflow_id, workflow_type, state::jsonb, state_version, 1, parked_on, subject_ref, at, at,
                 ended, release
          FROM items WHERE mode = 1
          ON CONFLICT (workflow_id) DO NOTHING
          RETURNING workflow_id, revision, state, state_version, parked_on, ended, updated_at),
        next_state AS (
          UPDATE {s}.state st SET state = it.state::jsonb, state_version = it.state_version,
                 revision = st.revision + 1, parked_on = it.parked_on,
                 subject_ref = coalesce(it.subject_ref, st.subject_ref), updated_at = it.at,
                 ended = coalesce(st.ended, it.ended), release = coalesce(st.release, it.release)
          FROM items it
          WHERE it.mode = 2 AND st.workflow_id = it.workflow_id AND st.revision = it.rev
          RETURNING st.workflow_id, st.revision, st.state, st.state_version, st.parked_on, st.ended,
                    st.updated_at),
        history AS (
          INSERT INTO {s}.state_history (workflow_id, revision, event_id, event_type, topic, partition,
                                         "offset", state, state_version, parked_on, ended, at)
          SELECT w.workflow_id, w.revision, it.event_id, it.event_type, it.src_topic, it.src_partition,
                 it.src_offset, w.state, w.state_version, w.parked_on, w.ended, w.updated_at
          FROM (SELECT * FROM first_state UNION ALL SELECT * FROM next_state) w
          JOIN items it ON it.workflow_id = w.workflow_id
               AND ((it.mode = 1 AND w.revision = 1) OR (it.mode = 2 AND w.revision = it.rev + 1))),
        outbox AS (
          INSERT INTO {s}.outbox (topic, key, value, headers, event_id, workflow_id)
          SELECT u.topic, u.key, u.value, u.headers::jsonb, u.event_id, u.workflow_id
          FROM unnest($17::text[], $18::bytea[], $19::bytea[], $20::text[], $21::uuid[], $22::text[])
               WITH ORDINALITY AS u(topic, key, value, headers, event_id, workflow_id, n)
          ORDER BY u.n
          RETURNING id),
        unparked AS (
          DELETE FROM {s}.parked WHERE id IN (SELECT parked_id FROM items WHERE parked_id IS NOT NULL)
          RETURNING 1),
        moved AS (
          -- A step decided with no checkpoint has no revision to check; should a checkpoint
          -- exist by now, it must still name this release (an operator may have moved the
          -- workflow meanwhile: chorus.releases.repin). Its lock holds a move off until commit.
          SELECT st.release AS pinned, it.release AS mine
          FROM {s}.state st JOIN items it ON st.workflow_id = it.workflow_id
          WHERE it.mode = 0 AND it.release IS NOT NULL
          FOR KEY SHARE OF st)
        SELECT CASE WHEN (SELECT count(*) FROM claim) <> $23
                      OR EXISTS (SELECT 1 FROM moved WHERE pinned IS NOT NULL AND pinned <> mine)
                      OR (SELECT count(*) FROM first_state) + (SELECT count(*) FROM next_state) <> $24
                    THEN ARRAY[chorus.step_conflict('batch')]::bigint[]
                    ELSE (SELECT array_agg(id) FROM outbox) END"""

    @staticmethod
    def _batch_args(writes: Sequence[StepWrite]) -> list[Any]:
        # One array per column, in the order of the statement's $1..$29 (unnest zips them).
        messages = [m for w in writes for m in w.messages]
        sources = [w.source for w in writes]
        return [
            *_columns(writes, "group", "event_id", "attempt", "outcome", "event_type", "workflow_id"),
            *_columns(writes, "now", "from_parked", "workflow_type"),
            [json.dumps(w.state) if w.state is not None else None for w in writes],
            *_columns(writes, "state_version"),
            [int(w.checkpoint) for w in writes],
            *_columns(writes, "parked_on", "subject_ref", "expected_revision", "parked_id"),
            *_columns(messages, "topic", "key", "value"),
            [_encode_headers(m.headers) for m in messages],
            *_columns(messages, "event_id", "workflow_id"),
            len(writes),
            sum(1 for w in writes if w.checkpoint is not CheckpointWrite.NONE),
            [w.ended for w in writes],
            [w.release for w in writes],
            [p.topic if p else None for p in sources],
            [p.partition if p else None for p in sources],
            [p.offset if p else None for p in sources],
        ]

    # -- parking --------------------------------------------------------------------------

    async def park(
        self, conn: asyncpg.Connection, workflow_id: str, rec: Record, attempt: int, now: datetime
    ) -> None:
        await conn.execute(
            f"""INSERT INTO {self.schema}.parked
                  (workflow_id, topic, partition, "offset", key, value, headers, attempt,
                   timestamp_ms, parked_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10)""",
            workflow_id,
            rec.topic,
            rec.partition,
            rec.offset,
            rec.key,
            rec.value or b"",
            _encode_headers(rec.headers),
            attempt,
            rec.timestamp_ms,
            now,
        )

    async def next_parked(self, conn: asyncpg.Connection, workflow_id: str) -> ParkedRow | None:
        row = await conn.fetchrow(
            f"""SELECT id, topic, partition, "offset", key, value, headers::text AS headers,
                       attempt, timestamp_ms
                FROM {self.schema}.parked WHERE workflow_id = $1 ORDER BY id LIMIT 1""",
            workflow_id,
        )
        if row is None:
            return None
        return ParkedRow(
            row["id"],
            row["topic"],
            row["partition"],
            row["offset"],
            row["key"],
            row["value"],
            _decode_headers(row["headers"]),
            row["attempt"],
            row["timestamp_ms"],
        )

    async def parked_on(self, conn: asyncpg.Connection, workflow_id: str) -> uuid.UUID | None:
        """The event the workflow waits on, if any."""
        value: uuid.UUID | None = await conn.fetchval(
            f"SELECT parked_on FROM {self.schema}.state WHERE workflow_id = $1", workflow_id
        )
        return value

    async def discard(
        self, conn: asyncpg.Connection, *, group: str, event_id: uuid.UUID, workflow_id: str, now: datetime
    ) -> None:
        """An operator gave up on a dead-lettered event: mark it discarded and stop parking
        the workflow behind it (later records of the workflow are drained next)."""
        await conn.execute(
            f"""UPDATE {self.schema}.inbox SET outcome = $3, processed_at = $4
                WHERE consumer_group = $1 AND event_id = $2 AND outcome = $5""",
            group,
            event_id,
            InboxOutcome.DISCARDED,
            now,
            InboxOutcome.DEAD_LETTERED,
        )
        await conn.execute(
            f"""UPDATE {self.schema}.state SET parked_on = NULL, revision = revision + 1,
                updated_at = $3 WHERE workflow_id = $1 AND parked_on = $2""",
            workflow_id,
            event_id,
            now,
        )

    async def unpark(self, conn: asyncpg.Connection, parked_id: int) -> None:
        await conn.execute(f"DELETE FROM {self.schema}.parked WHERE id = $1", parked_id)

    async def workflows_to_drain(
        self, conn: asyncpg.Connection, limit: int = 100, *, release: str | None = None, main: bool = True
    ) -> list[str]:
        """Workflows with parked records but nothing to wait on (a crash interrupted a drain).
        With ``release``, only those pinned to it (``main``: and those pinned to none): the
        parked table is the service's, shared by its releases, and only the owner drains."""
        rows = await conn.fetch(
            f"""SELECT DISTINCT p.workflow_id FROM {self.schema}.parked p
                LEFT JOIN {self.schema}.state s ON s.workflow_id = p.workflow_id
                WHERE s.parked_on IS NULL
                  AND ($2::text IS NULL OR s.release = $2 OR (s.release IS NULL AND $3))
                LIMIT $1""",
            limit,
            release,
            main,
        )
        return [r["workflow_id"] for r in rows]

    # -- outbox relay -----------------------------------------------------------------------

    async def pending_outbox(self, conn: asyncpg.Connection, limit: int) -> list[OutboxRow]:
        rows = await conn.fetch(
            f"""SELECT id, topic, key, value, headers::text AS headers, event_id FROM {self.schema}.outbox
                WHERE dispatched_at IS NULL ORDER BY id LIMIT $1""",
            limit,
        )
        return [
            OutboxRow(r["id"], r["topic"], r["key"], r["value"], _decode_headers(r["headers"]), r["event_id"])
            for r in rows
        ]

    async def mark_dispatched(self, conn: asyncpg.Connection, ids: Sequence[int], now: datetime) -> None:
        await conn.execute(
            f"UPDATE {self.schema}.outbox SET dispatched_at = $2 WHERE id = ANY($1::bigint[])",
            list(ids),
            now,
        )

    async def mark_failed(self, conn: asyncpg.Connection, row_id: int, failure: str, now: datetime) -> None:
        """Set a row aside for good: the relay will not try it again (it was dead-lettered)."""
        await conn.execute(
            f"""UPDATE {self.schema}.outbox SET dispatched_at = $2, failed_at = $2, failure = $3
                WHERE id = $1""",
            row_id,
            now,
            failure,
        )

    async def outbox_backlog(self, conn: asyncpg.Connection) -> int:
        return int(
            await conn.fetchval(f"SELECT count(*) FROM {self.schema}.outbox WHERE dispatched_at IS NULL")
        )

    async def purge_archive(self, conn: asyncpg.Connection, before: datetime) -> int:
        """Archived rows older than ``before`` (the archive's own keep time)."""
        return rows_affected(
            await conn.execute(f"DELETE FROM {self.schema}.archive WHERE archived_at < $1", before)
        )

    async def purge_dispatched(self, conn: asyncpg.Connection, before: datetime) -> int:
        result = await conn.execute(
            # Failed rows stay: their dead letter may reference the bytes instead of carrying them.
            f"""DELETE FROM {self.schema}.outbox
                WHERE dispatched_at IS NOT NULL AND dispatched_at < $1 AND failed_at IS NULL""",
            before,
        )
        return rows_affected(result)


def refused(exc: BaseException) -> RefusedByStoreError:
    """PostgreSQL refused a value of the write (a data exception): the record's failure."""
    error = RefusedByStoreError(f"PostgreSQL refused a value this record's outcome would store: {exc}")
    error.__cause__ = exc
    # A value out of range or text it cannot hold comes from the input; a NOT NULL or
    # CHECK violation, or a value of the wrong type, is the code's (and counts for the guard).
    error.caused_by_input = data_error_blames_input(exc)
    return error


class PgStore:
    """The record path's :class:`~chorus.kernel.store.Store` on PostgreSQL: each method one
    transaction on a connection of the pool."""

    def __init__(self, sql: ServiceStore, pool: asyncpg.Pool) -> None:
        self.sql = sql
        self.pool = pool

    async def load_many(self, group: str, keys: Sequence[tuple[uuid.UUID, str]]) -> list[Loaded]:
        async with self.pool.acquire() as conn:
            return await self.sql.load_many(conn, group, keys)

    async def commit_steps(self, writes: Sequence[StepWrite]) -> list[list[OutboxRow] | BaseException]:
        async with self.pool.acquire() as conn:
            try:
                return list(await self.sql.commit_steps(conn, writes))
            except ConflictError as exc:
                if len(writes) == 1:
                    return [exc]
            except Exception as exc:
                if not is_data_error(exc):
                    raise  # the database itself failed: every caller retries
                if len(writes) == 1:
                    return [refused(exc)]
            # One member of the batch conflicted or carries a value PostgreSQL refuses
            # (rare): commit one by one, so only that one is affected.
            return [await self._alone(conn, write) for write in writes]

    async def _alone(self, conn: asyncpg.Connection, write: StepWrite) -> list[OutboxRow] | BaseException:
        try:
            return await self.sql.commit_step(conn, write)
        except ConflictError as exc:
            return exc
        except Exception as exc:
            if not is_data_error(exc):
                raise
            return refused(exc)

    async def commit_with_effects(self, write: StepWrite, effects: Sequence[Effect]) -> list[OutboxRow]:
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                rows = await self.sql.commit_step(conn, write)
                fault_point("after_inbox_insert")
                for effect in effects:
                    await effect.apply(conn)
        except Exception as exc:
            if is_data_error(exc):
                raise refused(exc) from exc
            raise
        return rows

    async def checkpoint(self, checkpoint: Checkpoint) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            revision = await self.sql.write_state(conn, checkpoint)
            if checkpoint.messages:
                await self.sql.add_outbox(conn, checkpoint.messages)
            return revision

    async def park(self, claim: Claim, record: Record) -> bool:
        assert claim.workflow_id is not None
        async with self.pool.acquire() as conn, conn.transaction():
            if not await self.sql.claim_inbox(conn, claim):
                return False
            await self.sql.park(conn, claim.workflow_id, record, claim.attempt, claim.now)
        return True

    async def next_parked(self, workflow_id: str) -> ParkedRow | None:
        async with self.pool.acquire() as conn:
            row = await self.sql.next_parked(conn, workflow_id)
            if row is None or await self.sql.parked_on(conn, workflow_id) is not None:
                return None
        return row

    async def unpark(self, parked_id: int) -> None:
        async with self.pool.acquire() as conn:
            await self.sql.unpark(conn, parked_id)

    async def discard(self, *, group: str, event_id: uuid.UUID, workflow_id: str, now: datetime) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await self.sql.discard(conn, group=group, event_id=event_id, workflow_id=workflow_id, now=now)

    async def dead_letter(self, claim: Claim, message: OutboxMessage, parked_id: int | None) -> bool:
        async with self.pool.acquire() as conn, conn.transaction():
            claimed = await self.sql.claim_inbox(conn, claim)
            if parked_id is not None:
                await self.sql.unpark(conn, parked_id)
            if claimed:
                await self.sql.add_outbox(conn, [message])
        return claimed

    async def workflows_to_drain(self, release: str | None, main: bool) -> list[str]:
        async with self.pool.acquire() as conn:
            return await self.sql.workflows_to_drain(conn, release=release, main=main)
