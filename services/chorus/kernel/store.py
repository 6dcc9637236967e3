"""The durable state of one service: inbox, checkpoints, outbox and parked events.

Every service owns a PostgreSQL schema named after it; nothing outside the
service reads these tables (the gateway reads the audit projection instead). Deployed,
each service connects as a role of its name that owns the schema and can reach no other
(chorus_tools.dbroles), so the rule is the database's, not only the code's.

- ``inbox``   one row per (consumer group, event id): the outcome of that event.
              A delivery whose row says it is done is a duplicate and is skipped.
- ``state``   one checkpoint per workflow, with the state model's schema version
              and a revision for optimistic concurrency; ``parked_on`` names the
              event the workflow waits on (a retry or a dead letter) so later
              events of that workflow queue behind it instead of overtaking it.
- ``outbox``  events to publish, written in the same transaction as the state.
- ``parked``  records that arrived while their workflow was parked, in order.
- ``archive`` rows the service removed at a workflow's retirement in archive mode.

Erasure and retention reach these tables only through this service's runtime (see
``chorus.privacy.datarequests``): the audit projector asks, every service removes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum, StrEnum
from typing import Any

import asyncpg

from chorus.kernel.db import ident, rows_affected
from chorus.kernel.migrations import Migration, baseline, migrate


class InboxOutcome(StrEnum):
    """What the inbox holds for an event (``inbox.outcome``). DONE, REVIEW and DISCARDED
    are final; RETRYING and DEAD_LETTERED let a later attempt through (a durable retry, a
    redrive); PARKED lets the drain through once."""

    DONE = "done"
    RETRYING = "retrying"
    DEAD_LETTERED = "dead_lettered"
    PARKED = "parked"
    REVIEW = "review_requested"
    DISCARDED = "discarded"
    DROPPED = "dropped"
    """Arrived after the workflow ended: recorded, never handled (see Pipeline)."""
    NOT_MINE = "not_mine"
    """The workflow is pinned to another release of this service (chorus.releases.pinning):
    recorded, never handled here."""

    @classmethod
    def finished(cls) -> tuple[InboxOutcome, ...]:
        """The final outcomes: nothing takes the event again in that group."""
        return (cls.DONE, cls.REVIEW, cls.DISCARDED, cls.DROPPED, cls.NOT_MINE)


HANDED_OVER = ", ".join(
    f"'{o}'" for o in (InboxOutcome.DONE, InboxOutcome.REVIEW, InboxOutcome.DROPPED, InboxOutcome.DISCARDED)
)
"""Outcomes of the release a workflow was moved from that its new owner must not repeat:
it took the step, or an operator discarded it. (A move waits until no retry or dead letter
of it is pending there.)"""
FINISHED = ", ".join(f"'{o}'" for o in InboxOutcome.finished())
"""Outcomes after which an event of a workflow will not be taken again in that group."""


@dataclass(frozen=True)
class OutboxMessage:
    topic: str
    key: bytes | None
    value: bytes
    headers: Sequence[tuple[str, bytes]]
    event_id: uuid.UUID | None = None
    workflow_id: str | None = None

    @property
    def size(self) -> int:
        """Bytes of value, key and headers: what counts against a topic's record limit."""
        return record_size(self.value, self.key, self.headers)


def record_size(value: bytes, key: bytes | None, headers: Sequence[tuple[str, bytes]]) -> int:
    return len(value) + len(key or b"") + sum(len(k.encode()) + len(v) for k, v in headers)


@dataclass(frozen=True)
class OutboxRow:
    id: int
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    event_id: uuid.UUID | None = None

    @property
    def size(self) -> int:
        return record_size(self.value, self.key, self.headers)


@dataclass(frozen=True)
class InboxRow:
    outcome: InboxOutcome
    attempt: int


@dataclass(frozen=True)
class StateRow:
    state: dict[str, Any] | None
    state_version: int
    revision: int
    parked_on: uuid.UUID | None
    ended: str | None = None
    """How the workflow ended, once this service saw it end (its own outcome or a
    workflow.ended); later events for it are dropped."""
    release: str | None = None
    """The release of this service the workflow is pinned to (chorus.releases.pinning)."""
    repinned_from: tuple[str, ...] = ()
    """The consumer groups of the releases that owned the workflow before an operator moved
    it (chorus.releases.repin), oldest first."""


@dataclass(frozen=True)
class PinRow:
    """What a move to another release looks at in the checkpoint row."""

    release: str | None
    revision: int
    ended: str | None
    parked_on: uuid.UUID | None
    has_parked: bool


@dataclass(frozen=True)
class Loaded:
    inbox: InboxRow | None
    state: StateRow | None
    has_parked: bool
    handled_before: bool = False
    """A release the workflow was moved from took this event before the move."""


@dataclass(frozen=True)
class ParkedRow:
    id: int
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    attempt: int
    timestamp_ms: int | None


class CheckpointWrite(IntEnum):
    """What a step does to the workflow's checkpoint (the value travels into the step SQL)."""

    NONE = 0
    """The workflow has no checkpoint and the step leaves none (nothing to order behind)."""
    INSERT = 1
    """The workflow's first checkpoint."""
    UPDATE = 2
    """The next revision of the checkpoint, if it is still at ``expected_revision``."""


class ConflictError(Exception):
    """Another replica (or an earlier delivery) changed the workflow first; reload and retry."""


@dataclass(frozen=True)
class StepWrite:
    """Everything one handled event commits: inbox outcome, checkpoint, outbox rows, unpark."""

    group: str
    event_id: uuid.UUID
    attempt: int
    outcome: InboxOutcome
    event_type: str | None
    workflow_id: str | None
    workflow_type: str
    now: datetime
    from_parked: bool
    checkpoint: CheckpointWrite
    state: dict[str, Any] | None
    state_version: int
    expected_revision: int | None
    parked_on: uuid.UUID | None
    subject_ref: str | None
    messages: Sequence[OutboxMessage]
    parked_id: int | None
    ended: str | None = None
    """The workflow ends with this step (kept if it had ended before)."""
    release: str | None = None
    """The release that took this step: a first checkpoint is pinned to it."""


# Raised inside the step statement to undo its inbox and outbox writes when the
# checkpoint moved (SQLSTATE 40001, so it reads as the serialization conflict it is).
SUBJECT_HASH_FUNCTION = """
CREATE OR REPLACE FUNCTION chorus.subject_hash(ref text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT 'sha256:' || encode(sha256(convert_to(ref, 'UTF8')), 'hex')
$$
"""
"""How an erasure request names its subject (subject.erasure_requested carries only the
hash, never the reference). IMMUTABLE so that it can be indexed: convert_to to UTF-8 gives
the same bytes for the life of a database."""

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
        return [*baseline(self.ddl()), archive, ended, release, repinned]

    # -- erasure and retention (asked for by the audit projector; see chorus.privacy.datarequests)

    async def erase_subject(
        self,
        conn: asyncpg.Connection,
        subject_hash: str,
        workflow_ids: Sequence[str] = (),
        *,
        keep_running: bool = False,
    ) -> tuple[dict[str, int], int]:
        """Delete the checkpoints of the ended workflows of the subject whose reference
        hashes to ``subject_hash`` (see SUBJECT_HASH_FUNCTION), their parked records and
        published outbox rows (they hold event bytes), and archived rows of the subject or
        of those workflows: (rows per ``<schema>.<table>``, workflows touched). Undispatched
        outbox rows stay: the relay still owes them to Kafka.

        With ``keep_running`` (a service that handles ``workflow.ended``), a workflow still
        running here keeps its checkpoint and parked records: the projector ends it
        (``workflow.ended`` ``erased``, on another topic, so it may come later than this
        request) and the end handler needs the state to compensate (release a budget). What
        it holds of the subject is sealed under the keys the key service destroys; retention
        removes the rows with the workflow's lifetime."""
        s = self.schema
        deleted = await conn.fetch(
            f"""DELETE FROM {s}.state WHERE chorus.subject_hash(subject_ref) = $1
                AND subject_ref IS NOT NULL AND (ended IS NOT NULL OR NOT $2) RETURNING workflow_id""",
            subject_hash,
            keep_running,
        )
        running: set[str] = (
            {
                r["workflow_id"]
                for r in await conn.fetch(
                    f"""SELECT workflow_id FROM {s}.state WHERE chorus.subject_hash(subject_ref) = $1
                        AND subject_ref IS NOT NULL AND ended IS NULL""",
                    subject_hash,
                )
            }
            if keep_running
            else set()
        )
        archived = await conn.fetch(
            f"""SELECT DISTINCT workflow_id FROM {s}.archive
                WHERE chorus.subject_hash(subject_ref) = $1 AND subject_ref IS NOT NULL""",
            subject_hash,
        )
        # Rows of the subject's workflows may be here without a checkpoint naming it (a
        # fired timer, a redriven record): the projection's ids cover those.
        ids = sorted({r["workflow_id"] for r in [*deleted, *archived]} | set(workflow_ids))
        touched = {r["workflow_id"] for r in deleted}
        rows = {"state": len(deleted)}
        statements = {
            "parked": (
                f"""DELETE FROM {s}.parked
                    WHERE workflow_id = ANY($1::text[]) AND workflow_id <> ALL($2::text[])""",
                (sorted(running),),
            ),
            "outbox": (
                f"""DELETE FROM {s}.outbox
                    WHERE workflow_id = ANY($1::text[]) AND dispatched_at IS NOT NULL""",
                (),
            ),
            "archive": (
                f"""DELETE FROM {s}.archive
                    WHERE workflow_id = ANY($1::text[]) OR chorus.subject_hash(subject_ref) = $2""",
                (subject_hash,),
            ),
        }
        for table, (sql, extra) in statements.items():
            gone = await conn.fetch(f"{sql} RETURNING workflow_id", ids, *extra)
            rows[table] = len(gone)
            touched.update(r["workflow_id"] for r in gone if r["workflow_id"] is not None)
        return self._qualified(rows), len(touched)

    async def retire(
        self,
        conn: asyncpg.Connection,
        workflow_ids: Sequence[str],
        *,
        run_id: uuid.UUID,
        archive: bool,
        now: datetime,
    ) -> tuple[dict[str, int], int]:
        """Remove the rows of workflows past their lifetime: checkpoints, parked records,
        inbox rows and published outbox rows (archive mode copies checkpoints and parked
        records to ``archive`` first): (rows per ``<schema>.<table>``, workflows touched)."""
        s, ids = self.schema, list(workflow_ids)
        if archive:
            for table, subject in (("state", "t.subject_ref"), ("parked", "NULL")):
                await conn.execute(
                    f"""INSERT INTO {s}.archive (run_id, source, workflow_id, subject_ref, row, archived_at)
                        SELECT $1, $2, t.workflow_id, {subject}, to_jsonb(t), $3
                        FROM {s}.{table} t WHERE t.workflow_id = ANY($4::text[])""",
                    run_id,
                    f"{self.service}.{table}",
                    now,
                    ids,
                )
        touched: set[str] = set()
        rows: dict[str, int] = {}
        for table, where in (
            ("state", ""),
            ("parked", ""),
            ("inbox", ""),
            # Undispatched rows still have to reach Kafka; the relay owns them.
            ("outbox", "AND dispatched_at IS NOT NULL"),
        ):
            deleted = await conn.fetch(
                f"DELETE FROM {s}.{table} WHERE workflow_id = ANY($1::text[]) {where} RETURNING workflow_id",
                ids,
            )
            rows[table] = len(deleted)
            touched.update(r["workflow_id"] for r in deleted)
        return self._qualified(rows), len(touched)

    def _qualified(self, rows: dict[str, int]) -> dict[str, int]:
        return {f"{self.service}.{table}": n for table, n in sorted(rows.items()) if n}

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
                       st.release, st.repinned_from,
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
            )
        return Loaded(inbox, state, row["has_parked"], bool(row["handled_before"]))

    # -- the handling transaction -----------------------------------------------------

    async def claim_inbox(
        self,
        conn: asyncpg.Connection,
        *,
        group: str,
        event_id: uuid.UUID,
        attempt: int,
        outcome: InboxOutcome,
        event_type: str | None,
        workflow_id: str | None,
        now: datetime,
        from_parked: bool = False,
    ) -> bool:
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
            group,
            event_id,
            attempt,
            outcome,
            event_type,
            workflow_id,
            now,
            from_parked,
        )
        return row is not None

    async def write_state(
        self,
        conn: asyncpg.Connection,
        *,
        workflow_id: str,
        workflow_type: str,
        state: dict[str, Any] | None,
        state_version: int,
        expected_revision: int | None,
        parked_on: uuid.UUID | None,
        subject_ref: str | None,
        now: datetime,
        release: str | None = None,
    ) -> int:
        """Write the checkpoint if nobody moved it since ``expected_revision``; returns the new
        revision. A first checkpoint is pinned to ``release``."""
        body = json.dumps(state) if state is not None else None
        if expected_revision is None:
            revision = await conn.fetchval(
                f"""INSERT INTO {self.schema}.state
                      (workflow_id, workflow_type, state, state_version, revision, parked_on,
                       subject_ref, created_at, updated_at, release)
                    VALUES ($1, $2, $3::jsonb, $4, 1, $5, $6, $7, $7, $8)
                    ON CONFLICT (workflow_id) DO NOTHING
                    RETURNING revision""",
                workflow_id,
                workflow_type,
                body,
                state_version,
                parked_on,
                subject_ref,
                now,
                release,
            )
        else:
            revision = await conn.fetchval(
                f"""UPDATE {self.schema}.state
                    SET state = $2::jsonb, state_version = $3, revision = revision + 1,
                        parked_on = $4, subject_ref = coalesce($5, subject_ref), updated_at = $6
                    WHERE workflow_id = $1 AND revision = $7
                    RETURNING revision""",
                workflow_id,
                body,
                state_version,
                parked_on,
                subject_ref,
                now,
                expected_revision,
            )
        if revision is None:
            raise ConflictError(f"workflow {workflow_id} changed concurrently")
        return int(revision)

    async def claim_release(
        self,
        conn: asyncpg.Connection,
        *,
        workflow_id: str,
        workflow_type: str,
        release: str,
        state_version: int,
        now: datetime,
    ) -> str:
        """Pin a workflow nobody owns here yet to ``release``; returns the release it is
        pinned to (another's, when a release claimed or handled it first). A workflow
        without a checkpoint gets an empty one at revision 0 (its first handling still sees
        no state); a checkpoint from before pinning gets the release, and its next revision,
        so a step decided on the unpinned row cannot commit."""
        owner = await conn.fetchval(
            f"""INSERT INTO {self.schema}.state AS st
                  (workflow_id, workflow_type, state, state_version, revision, created_at,
                   updated_at, release)
                VALUES ($1, $2, NULL, $3, 0, $4, $4, $5)
                ON CONFLICT (workflow_id) DO UPDATE
                  SET release = EXCLUDED.release, revision = st.revision + 1, updated_at = $4
                  WHERE st.release IS NULL
                RETURNING release""",
            workflow_id,
            workflow_type,
            state_version,
            now,
            release,
        )
        if owner is None:
            owner = await conn.fetchval(
                f"SELECT release FROM {self.schema}.state WHERE workflow_id = $1", workflow_id
            )
        return str(owner)

    # -- moving a workflow to another release (chorus.releases.repin) ---------------------

    async def lock_pin(self, conn: asyncpg.Connection, workflow_id: str) -> None:
        """Serialise, for one workflow, a move to another release with every release's
        decision that an event of it is not theirs (until the transaction ends)."""
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"{self.schema}:{workflow_id}"
        )

    async def pin_of(
        self, conn: asyncpg.Connection, workflow_id: str, *, lock: bool = False
    ) -> PinRow | None:
        """The workflow's pin; ``lock``: held until the transaction ends, so that no release
        records an event of it as not its own meanwhile (see pass_event)."""
        row = await conn.fetchrow(
            f"""SELECT release, revision, ended, parked_on,
                       EXISTS (SELECT 1 FROM {self.schema}.parked p WHERE p.workflow_id = $1) AS has_parked
                FROM {self.schema}.state WHERE workflow_id = $1 {"FOR UPDATE" if lock else ""}""",
            workflow_id,
        )
        if row is None:
            return None
        return PinRow(row["release"], row["revision"], row["ended"], row["parked_on"], row["has_parked"])

    async def pass_event(
        self,
        conn: asyncpg.Connection,
        *,
        group: str,
        event_id: uuid.UUID,
        attempt: int,
        event_type: str,
        workflow_id: str,
        pinned_to: str | None,
        now: datetime,
    ) -> bool:
        """Record an event as another release's (``not_mine``); False when it was recorded
        already, or (``pinned_to``) the row no longer names that release: the workflow was
        moved meanwhile. The row's key-share lock waits for a move in progress (which holds
        the row FOR UPDATE) and sees its result, so no event is passed on a pin a move has
        just changed; the owner's own steps (no-key updates) do not wait for it."""
        guard = (
            f"""WITH pin AS (SELECT 1 FROM {self.schema}.state
                             WHERE workflow_id = $6 AND release = $7 FOR KEY SHARE)"""
            if pinned_to is not None
            else "WITH pin AS (SELECT 1 WHERE $7::text IS NULL)"
        )
        row = await conn.fetchrow(
            f"""{guard}
                INSERT INTO {self.schema}.inbox AS i
                  (consumer_group, event_id, attempt, outcome, event_type, workflow_id, processed_at)
                SELECT $1, $2, $3, '{InboxOutcome.NOT_MINE}', $4, $6, $5 WHERE EXISTS (SELECT 1 FROM pin)
                ON CONFLICT (consumer_group, event_id) DO UPDATE
                  SET attempt = EXCLUDED.attempt, outcome = EXCLUDED.outcome,
                      processed_at = EXCLUDED.processed_at
                  WHERE i.outcome IN ('{InboxOutcome.RETRYING}', '{InboxOutcome.DEAD_LETTERED}')
                    AND i.attempt < EXCLUDED.attempt
                RETURNING 1""",
            group,
            event_id,
            attempt,
            event_type,
            now,
            workflow_id,
            pinned_to,
        )
        return row is not None

    async def inbox_outcome(self, conn: asyncpg.Connection, group: str, event_id: uuid.UUID) -> str | None:
        outcome: str | None = await conn.fetchval(
            f"SELECT outcome FROM {self.schema}.inbox WHERE consumer_group = $1 AND event_id = $2",
            group,
            event_id,
        )
        return outcome

    async def pending_in(self, conn: asyncpg.Connection, group: str, workflow_id: str) -> int:
        """Events of the workflow a retry, a redrive or a drain of ``group`` will still take."""
        return int(
            await conn.fetchval(
                f"""SELECT count(*) FROM {self.schema}.inbox
                    WHERE workflow_id = $1 AND consumer_group = $2
                      AND outcome IN ('{InboxOutcome.RETRYING}', '{InboxOutcome.PARKED}',
                                      '{InboxOutcome.DEAD_LETTERED}')""",
                workflow_id,
                group,
            )
        )

    async def passed_unhandled(
        self,
        conn: asyncpg.Connection,
        *,
        workflow_id: str,
        passer: str,
        owner: str,
        event_types: Sequence[str],
    ) -> int:
        """Events of the workflow (of ``event_types``) that group ``passer`` recorded as not
        its own and group ``owner`` has not finished: moved now, nobody would take them."""
        return int(
            await conn.fetchval(
                f"""SELECT count(*) FROM {self.schema}.inbox t
                    WHERE t.workflow_id = $1 AND t.consumer_group = $2
                      AND t.outcome = '{InboxOutcome.NOT_MINE}' AND t.event_type = ANY($4::text[])
                      AND NOT EXISTS (SELECT 1 FROM {self.schema}.inbox o
                                      WHERE o.consumer_group = $3 AND o.event_id = t.event_id
                                        AND o.outcome IN ({FINISHED}))""",
                workflow_id,
                passer,
                owner,
                list(event_types),
            )
        )

    async def move_pin(
        self, conn: asyncpg.Connection, *, workflow_id: str, release: str, from_group: str, now: datetime
    ) -> None:
        """Pin the workflow's checkpoint to ``release``, remembering ``from_group`` (whose
        inbox tells the new owner what was taken before); its next revision, so a step the
        old owner decided before the move cannot commit."""
        await conn.execute(
            f"""UPDATE {self.schema}.state
                SET release = $2, revision = revision + 1, updated_at = $3,
                    repinned_from = array_append(coalesce(repinned_from, '{{}}'), $4::text)
                WHERE workflow_id = $1""",
            workflow_id,
            release,
            now,
            from_group,
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
        except (asyncpg.SerializationError, asyncpg.CardinalityViolationError) as exc:
            # A moved checkpoint, a duplicate, or one event twice in the batch.
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
                               $25::text[], $26::text[])
            AS t(grp, event_id, attempt, outcome, event_type, workflow_id, at, from_parked,
                 workflow_type, state, state_version, mode, parked_on, subject_ref, rev, parked_id,
                 ended, release)),
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
          RETURNING 1),
        next_state AS (
          UPDATE {s}.state st SET state = it.state::jsonb, state_version = it.state_version,
                 revision = st.revision + 1, parked_on = it.parked_on,
                 subject_ref = coalesce(it.subject_ref, st.subject_ref), updated_at = it.at,
                 ended = coalesce(st.ended, it.ended), release = coalesce(st.release, it.release)
          FROM items it
          WHERE it.mode = 2 AND st.workflow_id = it.workflow_id AND st.revision = it.rev
          RETURNING 1),
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
        # One array per column, in the order of the statement's $1..$26 (unnest zips them).
        messages = [m for w in writes for m in w.messages]
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
        ]

    # -- parking --------------------------------------------------------------------------

    async def park(
        self,
        conn: asyncpg.Connection,
        *,
        workflow_id: str,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes]],
        attempt: int,
        timestamp_ms: int | None,
        now: datetime,
    ) -> None:
        await conn.execute(
            f"""INSERT INTO {self.schema}.parked
                  (workflow_id, topic, partition, "offset", key, value, headers, attempt,
                   timestamp_ms, parked_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10)""",
            workflow_id,
            topic,
            partition,
            offset,
            key,
            value,
            _encode_headers(headers),
            attempt,
            timestamp_ms,
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
