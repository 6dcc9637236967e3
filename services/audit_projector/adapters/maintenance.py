"""Retention (the janitor) and erasure: the two writes that cross service schemas.

Every service on the runtime keeps ``<schema>.state`` (one checkpoint per workflow,
with ``subject_ref``), ``inbox``, ``parked`` and ``outbox``. Nothing registers them
anywhere, so both operations discover them in ``information_schema``: a schema takes
part when it has a ``state`` table with a ``workflow_id`` column.

Both hold the projection's maintenance lock exclusively (see ``projection``): the
projector cannot write a row between the moment they read the ledger and the moment
they commit. Each batch is one transaction, so a crash leaves either all of a batch's
workflows purged (and recorded) or none.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import asyncpg

from audit_projector.adapters.projection import (
    SCHEMA,
    insert_record,
    lock_maintenance,
    write_status,
)
from audit_projector.domain import (
    ERASED,
    ERASURE_RECORDED,
    ORIGIN_ERASURE,
    ORIGIN_JANITOR,
    ORIGIN_TOPIC,
    WORKFLOW_PURGED,
    WorkflowFacts,
    expiry_cutoff,
    lifetime,
    redact_facts,
    subject_hash,
)
from chorus.clock import Clock
from chorus.db import ident

_NAMESPACE = uuid.UUID("1b0c7d4e-8f5a-4d2e-9c61-61756469742d")
JanitorMode = Literal["archive", "purge"]


def quote(name: str) -> str:
    """A PostgreSQL identifier, quoted (names come from the catalog, not from users)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class ServiceTables:
    """The runtime tables one service schema has (those with a ``workflow_id``)."""

    schema: str
    tables: frozenset[str]
    state_has_subject: bool


async def service_schemas(conn: asyncpg.Connection) -> list[ServiceTables]:
    """Every schema with a ``state`` table keyed by ``workflow_id``, and which of
    ``inbox`` / ``parked`` / ``outbox`` it has beside it."""
    rows = await conn.fetch(
        """SELECT table_schema, table_name, column_name FROM information_schema.columns
           WHERE table_name IN ('state', 'inbox', 'parked', 'outbox')
             AND column_name IN ('workflow_id', 'subject_ref')"""
    )
    tables: dict[str, set[str]] = defaultdict(set)
    subject: set[str] = set()
    for r in rows:
        if r["column_name"] == "workflow_id":
            tables[r["table_schema"]].add(r["table_name"])
        elif r["table_name"] == "state":
            subject.add(r["table_schema"])
    return [
        ServiceTables(schema, frozenset(names), schema in subject)
        for schema, names in sorted(tables.items())
        if "state" in names
    ]


async def projection_schemas(conn: asyncpg.Connection) -> list[str]:
    """The live projection and every replay that still exists (they hold copies too)."""
    rows = await conn.fetch(
        """SELECT table_schema FROM information_schema.tables
           WHERE table_name IN ('audit_log', 'workflow_status')
           GROUP BY table_schema HAVING count(*) = 2 ORDER BY table_schema"""
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
    """``schema.table`` -> rows removed (archived first in archive mode)."""


async def janitor_pass(
    pool: asyncpg.Pool, *, clock: Clock, policy: RetentionPolicy, schema: str = SCHEMA
) -> JanitorReport:
    """Remove every workflow of the projection in ``schema`` whose lifetime (from its
    first event) has passed at ``clock.now()``: its state, parked, inbox and dispatched
    outbox rows in every service schema, and its projection rows; archive mode copies
    state, parked and projection rows to ``<schema>.archive`` first.

    Records a ``janitor_runs`` row (also when nothing expired), one ``audit.workflow_purged``
    audit row per workflow (no subject, no payload data), and a ``retired_workflows``
    tombstone so late or replayed events do not bring the workflow back. Safe to run on
    several replicas at once (batches serialise on the maintenance lock).
    """
    started = clock.now()
    report = JanitorReport(run_id=uuid.uuid4())
    while True:
        async with pool.acquire() as conn, conn.transaction():
            batch = await _purge_batch(conn, schema, clock.now(), policy, report)
        if batch < policy.batch_size:
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
    conn: asyncpg.Connection,
    schema: str,
    now: datetime,
    policy: RetentionPolicy,
    report: JanitorReport,
) -> int:
    s = ident(schema)
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
        policy.batch_size,
    )
    if not expired:
        return 0
    ids = [r["workflow_id"] for r in expired]
    archive = policy.mode == "archive"
    per_workflow: dict[str, Counter[str]] = defaultdict(Counter)

    async def remove(
        owner: str, table: str, *, archived: bool, subject: bool = False, where: str = ""
    ) -> None:
        source, name = f"{owner}.{table}", f"{quote(owner)}.{quote(table)}"
        if archived and archive:
            await conn.execute(
                f"""INSERT INTO {s}.archive
                      (run_id, source, workflow_id, subject_ref, row, archived_at)
                    SELECT $1, $2, t.workflow_id, {"t.subject_ref" if subject else "NULL"},
                           to_jsonb(t), $3
                    FROM {name} t WHERE t.workflow_id = ANY($4::text[]) {where}""",
                report.run_id,
                source,
                now,
                ids,
            )
        deleted = await conn.fetch(
            f"DELETE FROM {name} t WHERE t.workflow_id = ANY($1::text[]) {where} RETURNING t.workflow_id",
            ids,
        )
        for r in deleted:
            per_workflow[r["workflow_id"]][source] += 1

    for service in await service_schemas(conn):
        owner = service.schema
        await remove(owner, "state", archived=True, subject=service.state_has_subject)
        if "parked" in service.tables:
            await remove(owner, "parked", archived=True)
        if "inbox" in service.tables:
            await remove(owner, "inbox", archived=False)
        if "outbox" in service.tables:
            # Undispatched rows still have to reach Kafka; the relay owns them.
            await remove(owner, "outbox", archived=False, where="AND t.dispatched_at IS NOT NULL")
    await remove(schema, "audit_log", archived=True, subject=True)
    await remove(schema, "workflow_status", archived=True, subject=True)
    await conn.executemany(
        f"""INSERT INTO {s}.retired_workflows (workflow_id, workflow_type, retired_at, run_id)
            VALUES ($1, $2, $3, $4) ON CONFLICT (workflow_id) DO NOTHING""",
        [(r["workflow_id"], r["workflow_type"], now, report.run_id) for r in expired],
    )
    for r in expired:
        wf = r["workflow_id"]
        rows = dict(sorted(per_workflow[wf].items()))
        await insert_record(
            conn,
            schema,
            event_id=uuid.uuid5(_NAMESPACE, f"purge/{report.run_id}/{wf}"),
            origin=ORIGIN_JANITOR,
            event_type=WORKFLOW_PURGED,
            workflow_id=wf,
            workflow_type=r["workflow_type"],
            producer=schema,
            occurred_at=now,
            decision="archived" if archive else "purged",
            actor=None,
            payload={
                "run_id": str(report.run_id),
                "mode": policy.mode,
                "reason": "maximum lifetime reached",
                "lifetime_days": lifetime(
                    r["workflow_type"], policy.lifetimes_days, policy.default_days
                ).total_seconds()
                / 86400,
                "started_at": r["started_at"].isoformat(),
                "status": r["status"],
                "rows": rows,
            },
        )
        report.rows.update(per_workflow[wf])
    report.workflows.extend(ids)
    return len(expired)


# -- erasure ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ErasureReport:
    erasure_id: uuid.UUID
    subject_hash: str
    rows: dict[str, int]
    """``schema.table`` -> rows redacted or deleted."""
    workflows: int
    erased_at: datetime


async def erase_subject(
    conn: asyncpg.Connection,
    subject_ref: str,
    *,
    actor: str,
    now: datetime,
    ledger: str = SCHEMA,
) -> ErasureReport:
    """Remove a data subject's data, in one transaction:

    - every projection (live and remaining replays): audit rows with that
      ``subject_ref`` keep what happened and when, their payload becomes
      ``{"erased": true}`` and actor, external call and subject are cleared; status rows
      of the subject's workflows lose subject, result, reason and approval context;
    - every service schema: ``state`` rows with that ``subject_ref`` are deleted, and
      the parked and dispatched outbox rows of those workflows (they hold event bytes);
    - the janitor's archive rows of the subject and of its workflows are deleted.

    The ledger keeps only a hash of the reference, so the projector redacts on write
    whatever arrives for the subject later (and a replay rebuilds the redacted rows).
    Records an ``audit.erasure_recorded`` audit row: hash, counts, actor, time.
    Idempotent: erasing again finds nothing and records that it found nothing.
    """
    hashed = subject_hash(subject_ref)
    erasure_id = uuid.uuid4()
    rows: Counter[str] = Counter()
    workflows: set[str] = set()
    led = ident(ledger)
    async with conn.transaction():
        await lock_maintenance(conn, ledger, exclusive=True)
        await conn.execute(
            f"""INSERT INTO {led}.erasures (erasure_id, subject_hash, actor, erased_at, counts)
                VALUES ($1, $2, $3, $4, '{{}}')""",
            erasure_id,
            hashed,
            actor,
            now,
        )
        for projection in await projection_schemas(conn):
            try:
                async with conn.transaction():  # a savepoint: a replay may be dropped meanwhile
                    await _erase_in_projection(
                        conn,
                        projection,
                        subject_ref=subject_ref,
                        now=now,
                        rows=rows,
                        workflows=workflows,
                    )
            except asyncpg.UndefinedTableError:
                continue
        services = await service_schemas(conn)
        for service in services:
            if not service.state_has_subject:
                continue
            deleted = await conn.fetch(
                f"DELETE FROM {quote(service.schema)}.state WHERE subject_ref = $1 RETURNING workflow_id",
                subject_ref,
            )
            rows[f"{service.schema}.state"] += len(deleted)
            workflows.update(r["workflow_id"] for r in deleted)
        archived = await conn.fetch(
            f"SELECT DISTINCT workflow_id FROM {led}.archive WHERE subject_ref = $1",
            subject_ref,
        )
        workflows.update(r["workflow_id"] for r in archived)
        ids_list = sorted(workflows)
        for service in services:
            q = quote(service.schema)
            if "parked" in service.tables:
                rows[f"{service.schema}.parked"] += _count(
                    await conn.execute(
                        f"DELETE FROM {q}.parked WHERE workflow_id = ANY($1::text[])", ids_list
                    )
                )
            if "outbox" in service.tables:
                rows[f"{service.schema}.outbox"] += _count(
                    await conn.execute(
                        f"""DELETE FROM {q}.outbox WHERE workflow_id = ANY($1::text[])
                            AND dispatched_at IS NOT NULL""",
                        ids_list,
                    )
                )
        rows[f"{ledger}.archive"] += _count(
            await conn.execute(
                f"""DELETE FROM {led}.archive
                    WHERE subject_ref = $1 OR workflow_id = ANY($2::text[])""",
                subject_ref,
                ids_list,
            )
        )
        counts = {key: n for key, n in sorted(rows.items()) if n}
        await conn.execute(
            f"UPDATE {led}.erasures SET counts = $2::jsonb WHERE erasure_id = $1",
            erasure_id,
            json.dumps(counts),
        )
        await insert_record(
            conn,
            ledger,
            event_id=erasure_id,
            origin=ORIGIN_ERASURE,
            event_type=ERASURE_RECORDED,
            workflow_id=None,
            workflow_type=None,
            producer="chorus-cli",
            occurred_at=now,
            decision="erased",
            actor=actor,
            payload={
                "erasure_id": str(erasure_id),
                "subject_hash": hashed,
                "rows": counts,
                "workflows": len(workflows),
                "actor": actor,
                "erased_at": now.isoformat(),
            },
        )
    return ErasureReport(erasure_id, hashed, counts, len(workflows), now)


async def _erase_in_projection(
    conn: asyncpg.Connection,
    projection: str,
    *,
    subject_ref: str,
    now: datetime,
    rows: Counter[str],
    workflows: set[str],
) -> None:
    p = quote(projection)
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
              WHERE subject_ref = $1 AND origin = '{ORIGIN_TOPIC}' RETURNING 1)
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


def _count(status: str) -> int:
    """Rows affected, from a command status such as ``DELETE 3``."""
    return int(status.rsplit(maxsplit=1)[-1])
