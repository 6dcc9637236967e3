"""The projection tables and the one effect that writes them.

A projection lives in one PostgreSQL schema: ``audit_projector`` for the live one,
``audit_replay_<id>`` for a rebuild. Two tables:

- ``audit_log``        append-only, one row per event (primary key ``event_id``), plus
                       rows the projector writes itself (``origin`` janitor / erasure).
- ``workflow_status``  one row per workflow: the derived status columns the gateway
                       reads, and ``facts`` (jsonb), the order-independent fold they
                       are derived from (see ``chorus.platform.audit_projector.domain``).

The *ledger* (erasures, retired workflows, janitor runs, archive, and the services'
confirmations of erasures and retirements) exists once, in the
live schema; a replay consults the live ledger so that it never brings back what was
erased or purged.

Locks (transaction-scoped advisory locks, so nothing outlives a crash):

- every projection write holds the ledger's maintenance lock *shared*; erasure and
  the janitor hold it *exclusive*, so no write that read the ledger before an erasure
  commits after it (which would put erased data back);
- every projection write holds a per-(schema, workflow) lock, so two replicas folding
  events of one workflow from different partitions never lose an update.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from chorus.base.db import ident
from chorus.base.errors import ChorusError
from chorus.base.migrations import Migration, baseline, migrate
from chorus.contracts.base import CATALOG, EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.platform import OriginalRecord
from chorus.contracts.registry import SearchAttribute
from chorus.kernel.codec import upcast
from chorus.kernel.store.postgres import archive_ddl
from chorus.platform.audit_projector.domain import (
    ORIGIN_RESET,
    ORIGIN_TOPIC,
    AuditEntry,
    WorkflowFacts,
    attributes_of,
    audit_entry,
    derive,
    fold,
    redact_entry,
    redact_facts,
)
from chorus.privacy.crypto import subject_hash

SCHEMA = "audit_projector"
REPLAY_PREFIX = "audit_replay_"


def projection_ddl(schema: str) -> list[str]:
    s = ident(schema)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        f"""CREATE TABLE IF NOT EXISTS {s}.audit_log (
            event_id uuid PRIMARY KEY,
            origin text NOT NULL DEFAULT '{ORIGIN_TOPIC}',
            event_type text NOT NULL,
            schema_version int NOT NULL,
            workflow_id text,
            workflow_type text,
            producer text NOT NULL,
            occurred_at timestamptz NOT NULL,
            recorded_at timestamptz NOT NULL,
            trace_id text,
            causation_id text,
            decision text,
            actor text,
            external_call text,
            subject_ref text,
            payload jsonb NOT NULL)""",
        f"""CREATE INDEX IF NOT EXISTS audit_log_workflow
            ON {s}.audit_log (workflow_id, occurred_at)""",
        f"""CREATE INDEX IF NOT EXISTS audit_log_subject ON {s}.audit_log (subject_ref)
            WHERE subject_ref IS NOT NULL""",
        f"""CREATE TABLE IF NOT EXISTS {s}.workflow_status (
            workflow_id text PRIMARY KEY,
            workflow_type text NOT NULL,
            status text NOT NULL,
            stage text,
            waiting_for text,
            waiting_until timestamptz,
            attempts int NOT NULL,
            outcome text,
            outcome_reason text,
            result jsonb,
            started_at timestamptz NOT NULL,
            ended_at timestamptz,
            duration_s double precision,
            last_event_at timestamptz NOT NULL,
            events int NOT NULL,
            subject_ref text,
            pending_approval_id text,
            pending_tier text,
            pending_level int,
            pending_context jsonb,
            facts jsonb NOT NULL,
            updated_at timestamptz NOT NULL)""",
        # "What waits for a manager?" is the gateway's approvals inbox query.
        f"""CREATE INDEX IF NOT EXISTS workflow_status_pending ON {s}.workflow_status
            (pending_tier, waiting_until) WHERE pending_approval_id IS NOT NULL""",
        f"CREATE INDEX IF NOT EXISTS workflow_status_started ON {s}.workflow_status (started_at)",
        # "Which workflow has approval X?" (the gateway's decision endpoint).
        f"""CREATE INDEX IF NOT EXISTS workflow_status_approvals ON {s}.workflow_status
            USING gin ((facts->'approvals'))""",
        f"""CREATE INDEX IF NOT EXISTS workflow_status_subject ON {s}.workflow_status (subject_ref)
            WHERE subject_ref IS NOT NULL""",
        # Issue 19: GET /v1/workflows filters by submitter and searches business keys.
        f"ALTER TABLE {s}.workflow_status ADD COLUMN IF NOT EXISTS submitter_ref text",
        f"ALTER TABLE {s}.workflow_status ADD COLUMN IF NOT EXISTS business_key text",
        f"""CREATE INDEX IF NOT EXISTS workflow_status_listed ON {s}.workflow_status
            (started_at DESC, workflow_id DESC)""",
        f"""CREATE INDEX IF NOT EXISTS workflow_status_business_key ON {s}.workflow_status (business_key)
            WHERE business_key IS NOT NULL""",
        f"""CREATE INDEX IF NOT EXISTS workflow_status_submitter ON {s}.workflow_status
            (submitter_ref, started_at DESC) WHERE submitter_ref IS NOT NULL""",
    ]


def ledger_ddl(schema: str) -> list[str]:
    s = ident(schema)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        # Erased subjects, by hash only; consulted on every write (redact on write).
        f"""CREATE TABLE IF NOT EXISTS {s}.erasures (
            erasure_id uuid PRIMARY KEY,
            subject_hash text NOT NULL,
            actor text NOT NULL,
            erased_at timestamptz NOT NULL,
            counts jsonb NOT NULL)""",
        f"CREATE INDEX IF NOT EXISTS erasures_subject ON {s}.erasures (subject_hash)",
        # Workflows the janitor removed: late or replayed events never recreate them.
        f"""CREATE TABLE IF NOT EXISTS {s}.retired_workflows (
            workflow_id text PRIMARY KEY,
            workflow_type text NOT NULL,
            retired_at timestamptz NOT NULL,
            run_id uuid NOT NULL)""",
        f"""CREATE TABLE IF NOT EXISTS {s}.janitor_runs (
            run_id uuid PRIMARY KEY,
            started_at timestamptz NOT NULL,
            finished_at timestamptz NOT NULL,
            clock_now timestamptz NOT NULL,
            mode text NOT NULL,
            workflows int NOT NULL,
            rows jsonb NOT NULL)""",
        # Archived rows of any table, as jsonb (the runtime's archive table, which every
        # service has).
        *archive_ddl(s),
    ]


async def migrate_projection(conn: asyncpg.Connection, schema: str, *, ledger: bool) -> None:
    """Create the projection tables in ``schema`` (and the ledger when ``ledger``)."""
    await migrate(conn, schema=schema, component="projection", migrations=projection_migrations(schema))
    if ledger:
        await migrate(conn, schema=schema, component="ledger", migrations=ledger_migrations(schema))


def projection_migrations(schema: str) -> list[Migration]:
    s = ident(schema)
    version = Migration(
        2,
        "producer version",
        (f"ALTER TABLE {s}.audit_log ADD COLUMN IF NOT EXISTS producer_version text",),
    )
    attributes = Migration(
        3,
        "search attributes",
        (
            f"""ALTER TABLE {s}.workflow_status
                ADD COLUMN IF NOT EXISTS attributes jsonb NOT NULL DEFAULT '{{}}'::jsonb""",
            # Equality (=, IN) is containment, which this index answers.
            f"""CREATE INDEX IF NOT EXISTS workflow_status_attributes ON {s}.workflow_status
                USING gin (attributes jsonb_path_ops)""",
        ),
    )
    undone = Migration(
        4,
        "undone by a reset",
        (
            # The reset that undid an event (it stays in the timeline, struck out of the fold).
            f"ALTER TABLE {s}.audit_log ADD COLUMN IF NOT EXISTS undone_by text",
            # Each reset's undone events, whether projected yet or not: one that comes after
            # its reset (a replay reads topics in any order) is struck out as it is written.
            f"""CREATE TABLE IF NOT EXISTS {s}.undone (
                event_id uuid PRIMARY KEY,
                reset_id text NOT NULL,
                workflow_id text NOT NULL)""",
        ),
    )
    spend = Migration(
        5,
        "spend",
        # What the workflow's language models used (workflow.spend_recorded, summed).
        (f"ALTER TABLE {s}.workflow_status ADD COLUMN IF NOT EXISTS spend jsonb",),
    )
    streaming = Migration(
        6,
        "streaming",
        # What a model is writing in a step still running (agent.output_streamed, the latest).
        (f"ALTER TABLE {s}.workflow_status ADD COLUMN IF NOT EXISTS streaming jsonb",),
    )
    return [*baseline(projection_ddl(schema)), version, attributes, undone, spend, streaming]


def ledger_migrations(schema: str) -> list[Migration]:
    s = ident(schema)
    confirmations = Migration(
        2,
        "data confirmations",
        (
            # Which service confirmed which erasure or retirement (data.removed), and what
            # it removed: the operator's answer to "has every copy gone?".
            f"""CREATE TABLE IF NOT EXISTS {s}.data_confirmations (
                request text NOT NULL,
                request_id text NOT NULL,
                service text NOT NULL,
                workflows int NOT NULL,
                rows jsonb NOT NULL,
                confirmed_at timestamptz NOT NULL,
                PRIMARY KEY (request_id, service))""",
        ),
    )
    access = Migration(
        3,
        "access log",
        (
            # Every read of a workflow's personal data through the API: who (and for whom,
            # when a service asked on a person's behalf), which fields, when. Not derived
            # from the topics, so it lives in the ledger and no replay rebuilds it.
            f"""CREATE TABLE IF NOT EXISTS {s}.access_log (
                id bigserial PRIMARY KEY,
                at timestamptz NOT NULL,
                principal text NOT NULL,
                on_behalf_of text,
                workflow_id text NOT NULL,
                subject_hash text,
                fields text[] NOT NULL,
                route text NOT NULL)""",
            f"CREATE INDEX IF NOT EXISTS access_log_subject ON {s}.access_log (subject_hash, at)",
            f"CREATE INDEX IF NOT EXISTS access_log_workflow ON {s}.access_log (workflow_id, at)",
        ),
    )
    return [*baseline(ledger_ddl(schema)), confirmations, access]


def maintenance_key(ledger: str) -> int:
    """The advisory lock key that orders projection writes against erasure and janitor."""
    return zlib.crc32(f"chorus-audit-maintenance:{ledger}".encode())


def _schema_key(schema: str) -> int:
    # Two-key advisory locks take int4 halves; crc32 is unsigned 32-bit.
    return zlib.crc32(f"chorus-audit:{schema}".encode()) - 2**31


async def lock_maintenance(conn: asyncpg.Connection, ledger: str, *, exclusive: bool) -> None:
    fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    await conn.execute(f"SELECT {fn}($1::bigint)", maintenance_key(ledger))


@dataclass(frozen=True)
class ProjectEvent:
    """Project one event into ``schema``: an audit row and the workflow's status.

    Runs inside the transaction of the event's inbox row (an Effect). Idempotent by
    ``event_id`` on its own (the audit row's primary key guards the status fold), so a
    replay that sees a record twice, or a redrive, changes nothing the second time.
    Events of a retired workflow are dropped; events of an erased subject are written
    redacted.
    """

    schema: str
    ledger: str
    entry: AuditEntry
    payload: EventModel
    recorded_at: datetime
    attributes: Mapping[str, str | int | float] = field(default_factory=dict)
    """The search attributes the event states (``domain.attributes_of``)."""
    origin: str = ORIGIN_TOPIC

    async def apply(self, conn: asyncpg.Connection) -> None:
        s, ledger, entry = ident(self.schema), ident(self.ledger), self.entry
        # Locks first, in their own statement: a statement reads the snapshot taken when
        # it started, so reads in the same statement could miss an erasure that
        # committed while this one waited for the lock.
        await conn.execute(
            "SELECT pg_advisory_xact_lock_shared($1::bigint), pg_advisory_xact_lock($2::int, hashtext($3))",
            maintenance_key(self.ledger),
            _schema_key(self.schema),
            entry.workflow_id,
        )
        known = await conn.fetchrow(
            f"""SELECT EXISTS (SELECT 1 FROM {ledger}.retired_workflows
                               WHERE workflow_id = $1) AS retired,
                       EXISTS (SELECT 1 FROM {ledger}.erasures
                               WHERE subject_hash = $2) AS erased,
                       (SELECT facts::text FROM {s}.workflow_status
                        WHERE workflow_id = $1) AS facts,
                       (SELECT reset_id FROM {s}.undone WHERE event_id = $3) AS undone_by""",
            entry.workflow_id,
            subject_hash(entry.subject_ref) if entry.subject_ref is not None else None,
            entry.event_id,
        )
        if known["retired"]:
            return
        erased = bool(known["erased"])
        written = redact_entry(entry) if erased else entry
        if not await insert_audit_row(
            conn, s, written, self.recorded_at, origin=self.origin, undone_by=known["undone_by"]
        ):
            return  # projected before: the fold must not count it twice
        if known["undone_by"] is not None:
            return  # a reset undid it already: in the timeline, not in the status
        raw = known["facts"]
        facts = fold(
            WorkflowFacts.model_validate_json(raw) if raw is not None else None,
            entry,
            self.payload,
            self.attributes,
        )
        if erased or facts.erased:
            facts = redact_facts(facts)
        await write_status(conn, s, entry.workflow_id, facts, self.recorded_at)


@dataclass(frozen=True)
class UndoEvents:
    """An operator reset the workflow to one of its events (workflow.reset_requested): the
    request joins its timeline, the events after the point are marked undone by it (they
    stay, struck out; one not projected yet is when it comes), the operator's correction of
    the point is recorded (it travels inside the request), and the workflow's status is
    folded again from the rest. Idempotent, and commutative with the events it undoes."""

    request: ProjectEvent
    reset_id: str
    undone: Sequence[uuid.UUID]
    replacement: OriginalRecord | None
    search: Mapping[str, Mapping[str, SearchAttribute]]

    async def apply(self, conn: asyncpg.Connection) -> None:
        await self.request.apply(conn)  # takes the workflow's locks first
        s, workflow_id = ident(self.request.schema), self.request.entry.workflow_id
        await conn.execute(
            f"""INSERT INTO {s}.undone (event_id, reset_id, workflow_id)
                SELECT e, $2, $3 FROM unnest($1::uuid[]) AS e ON CONFLICT (event_id) DO NOTHING""",
            list(self.undone),
            self.reset_id,
            workflow_id,
        )
        await conn.execute(
            f"""UPDATE {s}.audit_log a SET undone_by = u.reset_id FROM {s}.undone u
                WHERE u.reset_id = $1 AND a.event_id = u.event_id AND a.undone_by IS NULL""",
            self.reset_id,
        )
        corrected = _corrected(self.replacement)
        if corrected is not None:
            entry, payload = corrected
            await ProjectEvent(
                schema=self.request.schema,
                ledger=self.request.ledger,
                entry=entry,
                payload=payload,
                recorded_at=self.request.recorded_at,
                origin=ORIGIN_RESET,
            ).apply(conn)
        await self._refold(conn, s, workflow_id)

    async def _refold(self, conn: asyncpg.Connection, s: str, workflow_id: str) -> None:
        rows = await conn.fetch(
            f"""SELECT event_id, event_type, schema_version, workflow_id, workflow_type, producer,
                       coalesce(producer_version, '') AS producer_version, occurred_at,
                       coalesce(trace_id, '') AS trace_id, causation_id, decision, actor,
                       external_call, subject_ref, payload::text AS payload
                FROM {s}.audit_log
                WHERE workflow_id = $1 AND undone_by IS NULL AND origin = ANY($2::text[])
                ORDER BY occurred_at, event_id""",
            workflow_id,
            [ORIGIN_TOPIC, ORIGIN_RESET],
        )
        facts: WorkflowFacts | None = None
        for row in rows:
            entry = AuditEntry(**{**dict(row), "payload": json.loads(row["payload"])})
            payload = _model_of(entry)
            facts = fold(facts, entry, payload, attributes_of(entry, payload, self.search))
        if facts is None:
            return
        was = await conn.fetchval(
            f"SELECT facts::text FROM {s}.workflow_status WHERE workflow_id = $1", workflow_id
        )
        if was is not None and WorkflowFacts.model_validate_json(was).erased:
            facts = redact_facts(facts)  # redacted rows name no subject: the status remembers
        erased = await conn.fetchval(
            f"SELECT EXISTS (SELECT 1 FROM {ident(self.request.ledger)}.erasures WHERE subject_hash = $1)",
            subject_hash(facts.subject.value) if facts.subject is not None else None,
        )
        if erased or facts.erased:
            facts = redact_facts(facts)
        await write_status(conn, s, workflow_id, facts, self.request.recorded_at)


def _corrected(record: OriginalRecord | None) -> tuple[AuditEntry, EventModel] | None:
    """The operator's correction of the point, as the gateway stated it (its envelope, as
    every service that takes its type reads it from the request)."""
    if record is None:
        return None
    try:
        envelope = Envelope.model_validate_json(base64.b64decode(record.value_b64, validate=True))
    except ValueError:
        return None
    payload = _model_of(audit_entry(envelope, EventModel.model_construct()))
    return audit_entry(envelope, payload), payload


def _model_of(entry: AuditEntry) -> EventModel:
    """The payload as its model, for the fold; one that no longer validates (redacted, or
    of a type this release does not know) folds as a bare event (its time and type)."""
    versions = [v for (t, v) in CATALOG if t == entry.event_type]
    if versions:
        latest = max(versions)
        try:
            payload = upcast(entry.event_type, entry.payload, entry.schema_version, latest)
            return CATALOG[(entry.event_type, latest)].model_validate(payload)
        except (ValueError, ChorusError):
            pass
    return EventModel.model_construct()


async def insert_audit_row(
    conn: asyncpg.Connection,
    schema: str,
    entry: AuditEntry,
    recorded_at: datetime,
    *,
    origin: str = ORIGIN_TOPIC,
    undone_by: str | None = None,
) -> bool:
    """Append a row; False when the event id is already there."""
    inserted = await conn.fetchval(
        f"""INSERT INTO {ident(schema)}.audit_log
              (event_id, origin, event_type, schema_version, workflow_id, workflow_type,
               producer, occurred_at, recorded_at, trace_id, causation_id, decision, actor,
               external_call, subject_ref, payload, producer_version, undone_by)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16::jsonb, $17, $18)
            ON CONFLICT (event_id) DO NOTHING
            RETURNING 1""",
        entry.event_id,
        origin,
        entry.event_type,
        entry.schema_version,
        entry.workflow_id,
        entry.workflow_type,
        entry.producer,
        entry.occurred_at,
        recorded_at,
        entry.trace_id,
        entry.causation_id,
        entry.decision,
        entry.actor,
        entry.external_call,
        entry.subject_ref,
        json.dumps(entry.payload),
        entry.producer_version,
        undone_by,
    )
    return inserted is not None


async def write_status(
    conn: asyncpg.Connection,
    schema: str,
    workflow_id: str,
    facts: WorkflowFacts,
    now: datetime,
) -> None:
    """Upsert the status row derived from ``facts``."""
    view = derive(facts)
    pending = view.pending_approval
    await conn.execute(
        f"""INSERT INTO {ident(schema)}.workflow_status AS w
              (workflow_id, workflow_type, status, stage, waiting_for, waiting_until, attempts,
               outcome, outcome_reason, result, started_at, ended_at, duration_s,
               last_event_at, events, subject_ref, pending_approval_id, pending_tier,
               pending_level, pending_context, facts, updated_at, submitter_ref, business_key,
               attributes, spend, streaming)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12, $13, $14, $15,
                    $16, $17, $18, $19, $20::jsonb, $21::jsonb, $22, $23, $24, $25::jsonb, $26::jsonb,
                    $27::jsonb)
            ON CONFLICT (workflow_id) DO UPDATE SET
              workflow_type = EXCLUDED.workflow_type, status = EXCLUDED.status,
              stage = EXCLUDED.stage, waiting_for = EXCLUDED.waiting_for,
              waiting_until = EXCLUDED.waiting_until, attempts = EXCLUDED.attempts,
              outcome = EXCLUDED.outcome, outcome_reason = EXCLUDED.outcome_reason,
              result = EXCLUDED.result, started_at = EXCLUDED.started_at,
              ended_at = EXCLUDED.ended_at, duration_s = EXCLUDED.duration_s,
              last_event_at = EXCLUDED.last_event_at, events = EXCLUDED.events,
              subject_ref = EXCLUDED.subject_ref,
              pending_approval_id = EXCLUDED.pending_approval_id,
              pending_tier = EXCLUDED.pending_tier, pending_level = EXCLUDED.pending_level,
              pending_context = EXCLUDED.pending_context, facts = EXCLUDED.facts,
              updated_at = EXCLUDED.updated_at, submitter_ref = EXCLUDED.submitter_ref,
              business_key = EXCLUDED.business_key, attributes = EXCLUDED.attributes,
              spend = EXCLUDED.spend, streaming = EXCLUDED.streaming""",
        workflow_id,
        view.workflow_type,
        view.status,
        view.stage,
        view.waiting_for,
        view.waiting_until,
        view.attempts,
        view.outcome,
        view.outcome_reason,
        _json(view.result),
        view.started_at,
        view.ended_at,
        view.duration_s,
        view.last_event_at,
        view.events,
        view.subject_ref,
        pending.approval_id if pending else None,
        pending.tier if pending else None,
        pending.level if pending else None,
        _json(pending.context) if pending else None,
        facts.model_dump_json(),
        now,
        view.submitter_ref,
        view.business_key,
        json.dumps(view.attributes),
        view.spend.model_dump_json() if view.spend else None,
        view.streaming.model_dump_json() if view.streaming else None,
    )


async def insert_record(
    conn: asyncpg.Connection,
    schema: str,
    *,
    event_id: UUID,
    origin: str,
    event_type: str,
    workflow_id: str | None,
    workflow_type: str | None,
    producer: str,
    occurred_at: datetime,
    decision: str | None,
    actor: str | None,
    payload: dict[str, Any],
) -> None:
    """Append a row the projector writes itself (janitor, erasure): no trace, no cause,
    no subject. Such rows are not derived from a topic, so a replay does not rebuild
    them and the replay comparison leaves them out."""
    await conn.execute(
        f"""INSERT INTO {ident(schema)}.audit_log
              (event_id, origin, event_type, schema_version, workflow_id, workflow_type,
               producer, occurred_at, recorded_at, decision, actor, payload)
            VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $7, $8, $9, $10::jsonb)
            ON CONFLICT (event_id) DO NOTHING""",
        event_id,
        origin,
        event_type,
        workflow_id,
        workflow_type,
        producer,
        occurred_at,
        decision,
        actor,
        json.dumps(payload),
    )


def _json(value: Any) -> str | None:
    return json.dumps(value) if value is not None else None


# -- comparing two projections ----------------------------------------------------------------

# Every column but recorded_at / updated_at (when the row was written, not what it says).
_AUDIT_COLUMNS = (
    "event_id, origin, event_type, schema_version, workflow_id, workflow_type, producer, "
    "producer_version, occurred_at, trace_id, causation_id, decision, actor, external_call, "
    "subject_ref, payload"
)
_STATUS_COLUMNS = (
    "workflow_id, workflow_type, status, stage, waiting_for, waiting_until, attempts, outcome, "
    "outcome_reason, result, started_at, ended_at, duration_s, last_event_at, events, "
    "subject_ref, pending_approval_id, pending_tier, pending_level, pending_context, facts"
)


@dataclass(frozen=True)
class WorkflowDigest:
    workflow_id: str
    digest: str
    started_at: datetime | None


async def workflow_digests(
    conn: asyncpg.Connection, schema: str, *, since: datetime | None = None
) -> dict[str, WorkflowDigest]:
    """md5 per workflow over its status row and its topic-derived audit rows (ordered by
    event id), deterministic columns only. With ``since``, audit rows of events that
    occurred before it are left out (a replay from a timestamp never saw them)."""
    s = ident(schema)
    rows = await conn.fetch(
        f"""WITH a AS (
              SELECT workflow_id,
                     md5(string_agg(md5(ROW({_AUDIT_COLUMNS})::text), '' ORDER BY event_id)) AS h
              FROM {s}.audit_log
              WHERE origin = '{ORIGIN_TOPIC}' AND workflow_id IS NOT NULL
                AND ($1::timestamptz IS NULL OR occurred_at >= $1)
              GROUP BY workflow_id),
            w AS (
              SELECT workflow_id, started_at, md5(ROW({_STATUS_COLUMNS})::text) AS h
              FROM {s}.workflow_status)
            SELECT coalesce(w.workflow_id, a.workflow_id) AS workflow_id, w.started_at,
                   md5(coalesce(w.h, '-') || coalesce(a.h, '-')) AS digest
            FROM w FULL JOIN a ON a.workflow_id = w.workflow_id""",
        since,
    )
    return {r["workflow_id"]: WorkflowDigest(r["workflow_id"], r["digest"], r["started_at"]) for r in rows}


def checksum(digests: dict[str, WorkflowDigest], scope: set[str]) -> str:
    """One md5 over the ordered per-workflow digests of the workflows in ``scope``."""
    md5 = hashlib.md5(usedforsecurity=False)
    for workflow_id in sorted(scope):
        digest = digests.get(workflow_id)
        md5.update(f"{workflow_id}:{digest.digest if digest else '-'}\n".encode())
    return md5.hexdigest()
