"""Retention (the janitor) and erasure, as the audit projector does them.

The projector removes and redacts its own rows (the live projection, the replays that
still exist, its archive) and publishes the request on chorus.data, in the same
transaction: ``workflows.retired`` for each batch the janitor removed,
``subject.erasure_requested`` for an erasure. Every other service removes what it holds
when it reads the request and confirms with ``data.removed`` (see
``chorus.privacy.datarequests``), which :class:`RecordConfirmation` keeps in the ledger.

Both hold the projection's maintenance lock exclusively (see ``projection``): the
projector cannot write a row between the moment they read the ledger and the moment
they commit. Each batch is one transaction, so a crash leaves either all of a batch's
workflows purged, recorded and announced, or none.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

import asyncpg

from chorus.base.clock import Clock
from chorus.base.db import ident, rows_affected
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.platform import (
    MAX_ERASED_PER_EVENT,
    MAX_RETIRED_PER_EVENT,
    DataRemoved,
    SubjectErasureRequested,
    WorkflowsRetired,
)
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.outbox import OutboxTransaction, OutboxWriter
from chorus.platform.audit_projector.adapters.projection import (
    REPLAY_PREFIX,
    SCHEMA,
    insert_record,
    lock_maintenance,
    write_status,
)
from chorus.platform.audit_projector.domain import (
    ERASED,
    ERASURE_RECORDED,
    ORIGIN_ERASURE,
    ORIGIN_JANITOR,
    ORIGIN_RESET,
    ORIGIN_TOPIC,
    WORKFLOW_PURGED,
    WorkflowFacts,
    expiry_cutoff,
    lifetime,
    redact_facts,
)
from chorus.privacy.crypto import subject_hash

_NAMESPACE = uuid.UUID("1b0c7d4e-8f5a-4d2e-9c61-61756469742d")
JanitorMode = Literal["archive", "purge"]
DATA_WORKFLOW_TYPE = "data_maintenance"
"""The workflow type of chorus.data requests (each request is its own small workflow)."""


async def projection_schemas(conn: asyncpg.Connection, ledger: str) -> list[str]:
    """The live projection and every replay of it that still exists (they hold copies too)."""
    rows = await conn.fetch(
        """SELECT table_schema FROM information_schema.tables
           WHERE table_name IN ('audit_log', 'workflow_status')
             AND (table_schema = $1 OR starts_with(table_schema, $2))
           GROUP BY table_schema HAVING count(*) = 2 ORDER BY table_schema""",
        ledger,
        REPLAY_PREFIX,
    )
    return [r["table_schema"] for r in rows]


# -- retention --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetentionPolicy:
    lifetimes_days: Mapping[str, float]
    default_days: float
    mode: JanitorMode = "archive"
    batch_size: int = 500


@dataclass
class JanitorReport:
    run_id: uuid.UUID
    workflows: list[str] = field(default_factory=list)
    rows: Counter[str] = field(default_factory=Counter)
    """``schema.table`` -> projection rows removed (archived first in archive mode);
    every other service counts its own in its ``data.removed`` confirmation."""
    batches: int = 0


@dataclass(frozen=True)
class Announcer:
    """How maintenance publishes its requests: the projector's outbox, under its name."""

    outbox: OutboxWriter
    producer: ProducerRef


async def janitor_pass(
    pool: asyncpg.Pool,
    *,
    clock: Clock,
    policy: RetentionPolicy,
    announce: Announcer,
    schema: str = SCHEMA,
) -> JanitorReport:
    """Retire every workflow of the projection in ``schema`` whose lifetime (from its
    first event) has passed at ``clock.now()``: remove its projection rows (archive mode
    copies them to ``<schema>.archive`` first) and publish ``workflows.retired`` for the
    batch, so every service removes its own rows of those workflows.

    Records a ``janitor_runs`` row (also when nothing expired), one ``audit.workflow_purged``
    audit row per workflow (no subject, no payload data), and a ``retired_workflows``
    tombstone so late or replayed events do not bring the workflow back. Safe to run on
    several replicas at once (batches serialise on the maintenance lock).
    """
    started = clock.now()
    report = JanitorReport(run_id=uuid.uuid4())
    size = min(policy.batch_size, MAX_RETIRED_PER_EVENT)
    while True:
        async with pool.acquire() as conn, announce.outbox.transaction(conn) as tx:
            batch = await _purge_batch(tx, schema, clock.now(), policy, size, report, announce.producer)
        if batch < size:
            break
    async with pool.acquire() as conn:
        await conn.execute(
            f"""INSERT INTO {ident(schema)}.janitor_runs
                  (run_id, started_at, finished_at, clock_now, mode, workflows, rows)
                VALUES ($1, $2, $3, $2, $4, $5, $6::jsonb)""",
            report.run_id,
            started,
            clock.now(),
            policy.mode,
            len(report.workflows),
            json.dumps(dict(sorted(report.rows.items()))),
        )
    return report


async def _purge_batch(
    tx: OutboxTransaction,
    schema: str,
    now: datetime,
    policy: RetentionPolicy,
    limit: int,
    report: JanitorReport,
    producer: ProducerRef,
) -> int:
    conn, s = tx.conn, ident(schema)
    await lock_maintenance(conn, schema, exclusive=True)
    types = sorted(policy.lifetimes_days)
    # The domain's rule, as one cutoff per type: started at or before it means expired.
    cutoffs = [expiry_cutoff(t, now, policy.lifetimes_days, policy.default_days) for t in types]
    default_cutoff = expiry_cutoff("", now, {}, policy.default_days)
    expired = await conn.fetch(
        f"""SELECT w.workflow_id, w.workflow_type, w.status, w.started_at
            FROM {s}.workflow_status w
            LEFT JOIN unnest($1::text[], $2::timestamptz[]) AS l(workflow_type, cutoff)
              ON l.workflow_type = w.workflow_type
            WHERE w.started_at <= $4 AND w.started_at <= coalesce(l.cutoff, $3)
            ORDER BY w.started_at, w.workflow_id
            LIMIT $5""",
        types,
        cutoffs,
        default_cutoff,
        max([default_cutoff, *cutoffs]),
        limit,
    )
    if not expired:
        return 0
    ids = [r["workflow_id"] for r in expired]
    archive = policy.mode == "archive"
    per_workflow: dict[str, Counter[str]] = defaultdict(Counter)
    for table in ("audit_log", "workflow_status"):
        source, name = f"{schema}.{table}", f"{s}.{table}"
        if archive:
            await conn.execute(
                f"""INSERT INTO {s}.archive
                      (run_id, source, workflow_id, subject_ref, row, archived_at)
                    SELECT $1, $2, t.workflow_id, t.subject_ref, to_jsonb(t), $3
                    FROM {name} t WHERE t.workflow_id = ANY($4::text[])""",
                report.run_id,
                source,
                now,
                ids,
            )
        deleted = await conn.fetch(
            f"DELETE FROM {name} t WHERE t.workflow_id = ANY($1::text[]) RETURNING t.workflow_id", ids
        )
        for r in deleted:
            per_workflow[r["workflow_id"]][source] += 1
    await conn.execute(f"DELETE FROM {s}.undone WHERE workflow_id = ANY($1::text[])", ids)
    await conn.executemany(
        f"""INSERT INTO {s}.retired_workflows (workflow_id, workflow_type, retired_at, run_id)
            VALUES ($1, $2, $3, $4) ON CONFLICT (workflow_id) DO NOTHING""",
        [(r["workflow_id"], r["workflow_type"], now, report.run_id) for r in expired],
    )
    for r in expired:
        await _record_purge(
            conn, schema, r, dict(sorted(per_workflow[r["workflow_id"]].items())), policy, report, now
        )
        report.rows.update(per_workflow[r["workflow_id"]])
    report.batches += 1
    await tx.publish(_retirement_request(report, policy.mode, ids, producer, now))
    report.workflows.extend(ids)
    return len(expired)


async def _record_purge(
    conn: asyncpg.Connection,
    schema: str,
    workflow: asyncpg.Record,
    rows: dict[str, int],
    policy: RetentionPolicy,
    report: JanitorReport,
    now: datetime,
) -> None:
    """The ``audit.workflow_purged`` row of one retired workflow: no subject, no payload data."""
    await insert_record(
        conn,
        schema,
        event_id=uuid.uuid5(_NAMESPACE, f"purge/{report.run_id}/{workflow['workflow_id']}"),
        origin=ORIGIN_JANITOR,
        event_type=WORKFLOW_PURGED,
        workflow_id=workflow["workflow_id"],
        workflow_type=workflow["workflow_type"],
        producer=schema,
        occurred_at=now,
        decision="archived" if policy.mode == "archive" else "purged",
        actor=None,
        payload={
            "run_id": str(report.run_id),
            "mode": policy.mode,
            "reason": "maximum lifetime reached",
            "lifetime_days": lifetime(
                workflow["workflow_type"], policy.lifetimes_days, policy.default_days
            ).total_seconds()
            / 86400,
            "started_at": workflow["started_at"].isoformat(),
            "status": workflow["status"],
            "rows": rows,
        },
    )


def _retirement_request(
    report: JanitorReport, mode: JanitorMode, ids: list[str], producer: ProducerRef, now: datetime
) -> Envelope:
    """The request every service answers for the batch just retired here."""
    request_id = f"{report.run_id}/{report.batches}"
    return start_envelope(
        WorkflowsRetired(run_id=str(report.run_id), batch=report.batches, mode=mode, workflow_ids=ids),
        workflow_id=f"retention-{report.run_id}",
        workflow_type=DATA_WORKFLOW_TYPE,
        producer=producer,
        now=now,
        idempotency_key=request_id,
        event_id=uuid.uuid5(_NAMESPACE, f"retired/{request_id}"),
    )


# -- erasure ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ErasureReport:
    erasure_id: uuid.UUID
    subject_hash: str
    rows: dict[str, int]
    """``schema.table`` -> projection rows redacted or deleted; every other service counts
    its own in its ``data.removed`` confirmation."""
    workflows: int
    erased_at: datetime


async def erase_subject(
    tx: OutboxTransaction,
    subject_ref: str,
    *,
    actor: str,
    now: datetime,
    announce: Announcer,
    ledger: str = SCHEMA,
) -> ErasureReport:
    """Remove a data subject's data from the projections, and ask every service to do the
    same (``subject.erasure_requested``), in the transaction of ``tx``:

    - every projection (live and remaining replays): audit rows with that
      ``subject_ref`` keep what happened and when, their payload becomes
      ``{"erased": true}`` and actor, external call and subject are cleared; status rows
      of the subject's workflows lose subject, result, reason and approval context;
    - the archive rows of the subject and of its workflows are deleted.

    The ledger keeps only a hash of the reference, so the projector redacts on write
    whatever arrives for the subject later (and a replay rebuilds the redacted rows).
    Records an ``audit.erasure_recorded`` audit row: hash, counts, actor, time.
    Idempotent: erasing again finds nothing and records that it found nothing.
    """
    conn = tx.conn
    conn = tx.conn
    led = ident(ledger)
    await lock_maintenance(conn, ledger, exclusive=True)
    report = ErasureReport(uuid.uuid4(), subject_hash(subject_ref), {}, 0, now)
    await conn.execute(
        f"""INSERT INTO {led}.erasures (erasure_id, subject_hash, actor, erased_at, counts)
            VALUES ($1, $2, $3, $4, '{{}}')""",
        report.erasure_id,
        report.subject_hash,
        actor,
        now,
    )
    rows, workflows = await _erase_projections(conn, ledger, subject_ref, now)
    report = replace(report, rows={key: n for key, n in sorted(rows.items()) if n}, workflows=len(workflows))
    await conn.execute(
        f"UPDATE {led}.erasures SET counts = $2::jsonb WHERE erasure_id = $1",
        report.erasure_id,
        json.dumps(report.rows),
    )
    ids = sorted(workflows)
    parts = [ids[i : i + MAX_ERASED_PER_EVENT] for i in range(0, len(ids), MAX_ERASED_PER_EVENT)] or [[]]
    await insert_record(
        conn,
        ledger,
        event_id=report.erasure_id,
        origin=ORIGIN_ERASURE,
        event_type=ERASURE_RECORDED,
        workflow_id=None,
        workflow_type=None,
        producer=announce.producer.service,
        occurred_at=now,
        decision="erased",
        actor=actor,
        payload={
            "erasure_id": str(report.erasure_id),
            "subject_hash": report.subject_hash,
            "rows": report.rows,
            "workflows": report.workflows,
            "parts": len(parts),
            "actor": actor,
            "erased_at": now.isoformat(),
        },
    )
    # A workflow still running ends now, as ``erased``: each service stops it and runs its
    # compensation (the budget is released), instead of waiting on data that is gone.
    running = await conn.fetch(
        f"""SELECT workflow_id, workflow_type FROM {led}.workflow_status
            WHERE workflow_id = ANY($1::text[]) AND outcome IS NULL ORDER BY workflow_id""",
        ids,
    )
    for row in running:
        await tx.publish(_erased_end(report, row["workflow_id"], row["workflow_type"], announce.producer))
    for number, part in enumerate(parts, start=1):
        await tx.publish(_erasure_request(report, actor, part, number, len(parts), announce.producer))
    return report


def _erased_end(
    report: ErasureReport, workflow_id: str, workflow_type: str, producer: ProducerRef
) -> Envelope:
    key = f"{report.erasure_id}/end/{workflow_id}"
    return start_envelope(
        WorkflowEnded(outcome="erased", result={"erased": True}, ended_by=producer.service),
        workflow_id=workflow_id,
        workflow_type=workflow_type,
        producer=producer,
        now=report.erased_at,
        idempotency_key=key,
        event_id=uuid.uuid5(_NAMESPACE, key),
    )


async def _erase_projections(
    conn: asyncpg.Connection, ledger: str, subject_ref: str, now: datetime
) -> tuple[Counter[str], set[str]]:
    """Redact the subject in every projection and delete its archived rows: (rows per
    ``<schema>.<table>``, the subject's workflows found)."""
    rows: Counter[str] = Counter()
    workflows: set[str] = set()
    for projection in await projection_schemas(conn, ledger):
        try:
            async with conn.transaction():  # a savepoint: a replay may be dropped meanwhile
                await _erase_in_projection(
                    conn, projection, subject_ref=subject_ref, now=now, rows=rows, workflows=workflows
                )
        except asyncpg.UndefinedTableError:
            continue
    led = ident(ledger)
    archived = await conn.fetch(
        f"SELECT DISTINCT workflow_id FROM {led}.archive WHERE subject_ref = $1", subject_ref
    )
    workflows.update(r["workflow_id"] for r in archived)
    rows[f"{ledger}.archive"] += rows_affected(
        await conn.execute(
            f"DELETE FROM {led}.archive WHERE subject_ref = $1 OR workflow_id = ANY($2::text[])",
            subject_ref,
            sorted(workflows),
        )
    )
    return rows, workflows


def _erasure_request(
    report: ErasureReport, actor: str, workflow_ids: list[str], part: int, parts: int, producer: ProducerRef
) -> Envelope:
    """Part ``part`` of ``parts`` of the request every service answers."""
    request = SubjectErasureRequested(
        erasure_id=str(report.erasure_id),
        subject_hash=report.subject_hash,
        actor=actor,
        requested_at=report.erased_at,
        workflow_ids=workflow_ids,
        part=part,
        parts=parts,
    )
    return start_envelope(
        request,
        workflow_id=f"erasure-{report.erasure_id}",
        workflow_type=DATA_WORKFLOW_TYPE,
        producer=producer,
        now=report.erased_at,
        idempotency_key=f"{report.erasure_id}/{part}",
        event_id=uuid.uuid5(_NAMESPACE, f"erasure/{report.erasure_id}/{part}"),
    )


# -- confirmations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordConfirmation:
    """Keep one service's ``data.removed`` in the ledger (an Effect, committed with the
    event's inbox row; a copy of a confirmation changes nothing)."""

    ledger: str
    confirmation: DataRemoved
    confirmed_at: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        c = self.confirmation
        await conn.execute(
            f"""INSERT INTO {ident(self.ledger)}.data_confirmations
                  (request, request_id, service, workflows, rows, confirmed_at)
                VALUES ($1, $2, $3, $4, $5::jsonb, $6)
                ON CONFLICT (request_id, service) DO NOTHING""",
            c.request,
            c.request_id,
            c.service,
            c.workflows,
            json.dumps(c.rows),
            self.confirmed_at,
        )


async def confirmations(conn: asyncpg.Connection, request_id: str, *, ledger: str = SCHEMA) -> dict[str, Any]:
    """service -> {workflows, rows, confirmed_at, parts} of the confirmations of
    ``request_id`` (of all its parts, ``request_id/<n>``, when it was asked in parts)."""
    found = await conn.fetch(
        f"""SELECT service, workflows, rows::text AS rows, confirmed_at
            FROM {ident(ledger)}.data_confirmations
            WHERE request_id = $1 OR starts_with(request_id, $1 || '/')
            ORDER BY service, request_id""",
        request_id,
    )
    by_service: dict[str, Any] = {}
    for r in found:
        seen = by_service.setdefault(
            r["service"], {"workflows": 0, "rows": Counter(), "confirmed_at": r["confirmed_at"], "parts": 0}
        )
        seen["workflows"] += r["workflows"]
        seen["rows"].update(json.loads(r["rows"]))
        seen["confirmed_at"] = max(seen["confirmed_at"], r["confirmed_at"])
        seen["parts"] += 1
    return {
        service: {
            **seen,
            "rows": dict(sorted(seen["rows"].items())),
            "confirmed_at": seen["confirmed_at"].isoformat(),
        }
        for service, seen in by_service.items()
    }


async def erasure(
    conn: asyncpg.Connection, erasure_id: uuid.UUID, *, ledger: str = SCHEMA
) -> dict[str, Any] | None:
    """One erasure as recorded: hash, actor, time, projection counts and confirmations."""
    row = await conn.fetchrow(
        f"""SELECT e.erasure_id, e.subject_hash, e.actor, e.erased_at, e.counts::text AS counts,
                   coalesce((a.payload->>'parts')::int, 1) AS parts
            FROM {ident(ledger)}.erasures e
            LEFT JOIN {ident(ledger)}.audit_log a ON a.event_id = e.erasure_id
            WHERE e.erasure_id = $1""",
        erasure_id,
    )
    if row is None:
        return None
    return {
        "erasure_id": str(row["erasure_id"]),
        "subject_hash": row["subject_hash"],
        "actor": row["actor"],
        "erased_at": row["erased_at"].isoformat(),
        "rows": json.loads(row["counts"]),
        "parts": row["parts"],
        "confirmations": await confirmations(conn, str(erasure_id), ledger=ledger),
    }


async def _erase_in_projection(
    conn: asyncpg.Connection,
    projection: str,
    *,
    subject_ref: str,
    now: datetime,
    rows: Counter[str],
    workflows: set[str],
) -> None:
    p = ident(projection)
    ids = await conn.fetch(
        f"""SELECT workflow_id FROM {p}.workflow_status WHERE subject_ref = $1
            UNION
            SELECT workflow_id FROM {p}.audit_log
            WHERE subject_ref = $1 AND workflow_id IS NOT NULL""",
        subject_ref,
    )
    rows[f"{projection}.audit_log"] += await conn.fetchval(
        f"""WITH r AS (
              UPDATE {p}.audit_log
              SET payload = $2::jsonb, actor = NULL, external_call = NULL, subject_ref = NULL
              WHERE subject_ref = $1 AND origin IN ('{ORIGIN_TOPIC}', '{ORIGIN_RESET}') RETURNING 1)
            SELECT count(*) FROM r""",
        subject_ref,
        json.dumps(ERASED),
    )
    for r in ids:
        raw = await conn.fetchval(
            f"SELECT facts::text FROM {p}.workflow_status WHERE workflow_id = $1 FOR UPDATE",
            r["workflow_id"],
        )
        if raw is None:
            continue
        facts = redact_facts(WorkflowFacts.model_validate_json(raw))
        await write_status(conn, projection, r["workflow_id"], facts, now)
        rows[f"{projection}.workflow_status"] += 1
        workflows.add(r["workflow_id"])
