"""The rollout service's tables.

- ``policies``     the current policy of each service (the latest ``rollout.changed``);
- ``changes``      every change ever made, with who and why (the audit of rollouts; the
                   compacted topic keeps only the latest per service);
- ``assignments``  which release each workflow was pinned to, per service (from the pins of
                   its ``workflow.started``);
- ``endings``      how each workflow ended (its first ``workflow.ended``);
- ``failures``     each dead letter and review of a workflow, by the release that raised it;
- ``reports``      what each replica of each release reported (``release.reported``);
- ``repins``       every request to move a workflow to another release: who, why, and the
                   owning release's answer (the audit of moves).

Rows per workflow leave with the workflow's retention (:class:`RolloutRetention`).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from chorus.base import migrations
from chorus.base.db import rows_affected
from chorus.contracts.rollouts import ReleaseReported, RepinAnswered, RepinRequested, RolloutChanged
from chorus.kernel.service import ErasedAsRetired
from chorus.platform.rollout_service.domain import FAILING_CATEGORIES, Outcomes, ReleaseStatus, role_of

SCHEMA = "rollout_service"

DDL = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.policies (
        service text PRIMARY KEY,
        revision int NOT NULL,
        body jsonb NOT NULL,
        changed_at timestamptz NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.changes (
        id bigserial PRIMARY KEY,
        service text NOT NULL,
        revision int NOT NULL,
        action text NOT NULL,
        actor text NOT NULL,
        reason text,
        body jsonb NOT NULL,
        at timestamptz NOT NULL,
        UNIQUE (service, revision))""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.assignments (
        workflow_id text NOT NULL,
        service text NOT NULL,
        release text NOT NULL,
        workflow_type text NOT NULL,
        started_at timestamptz NOT NULL,
        PRIMARY KEY (workflow_id, service))""",
    f"CREATE INDEX IF NOT EXISTS assignments_by_release ON {SCHEMA}.assignments (service, release)",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.endings (
        workflow_id text PRIMARY KEY,
        outcome text NOT NULL,
        ended_at timestamptz NOT NULL)""",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.failures (
        event_id uuid PRIMARY KEY,
        workflow_id text NOT NULL,
        service text NOT NULL,
        release text NOT NULL,
        category text NOT NULL,
        dead_letter bool NOT NULL,
        at timestamptz NOT NULL)""",
    f"CREATE INDEX IF NOT EXISTS failures_by_workflow ON {SCHEMA}.failures (workflow_id, service)",
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.reports (
        event_id uuid PRIMARY KEY,
        service text NOT NULL,
        release text NOT NULL,
        instance text NOT NULL,
        window_end timestamptz NOT NULL,
        steps bigint NOT NULL,
        p50_ms double precision,
        p99_ms double precision)""",
    f"CREATE INDEX IF NOT EXISTS reports_by_release ON {SCHEMA}.reports (service, release, window_end)",
]


REPINS = migrations.Migration(
    2,
    "repins",
    (
        f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.repins (
            request_id uuid PRIMARY KEY,
            service text NOT NULL,
            workflow_id text NOT NULL,
            from_release text,
            to_release text NOT NULL,
            requested_by text NOT NULL,
            reason text NOT NULL,
            requested_at timestamptz NOT NULL,
            outcome text,
            answered_by text,
            refusal text,
            answered_at timestamptz)""",
        f"CREATE INDEX IF NOT EXISTS repins_by_service ON {SCHEMA}.repins (service, requested_at)",
        f"CREATE INDEX IF NOT EXISTS repins_by_workflow ON {SCHEMA}.repins (workflow_id)",
    ),
)


REPIN_ORDERS = migrations.Migration(
    3,
    "repin_orders",
    (
        # An operator's order to move a workflow (workflow.repin_ordered, stated by the gateway):
        # stored with its inbox row, asked for (or refused, in repins) by the repin worker.
        f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.repin_orders (
            order_id uuid PRIMARY KEY,
            service text NOT NULL,
            workflow_id text NOT NULL,
            to_release text NOT NULL,
            requested_by text NOT NULL,
            reason text NOT NULL,
            ordered_at timestamptz NOT NULL,
            retry_at timestamptz,
            done_at timestamptz)""",
        f"""CREATE INDEX IF NOT EXISTS repin_orders_pending
            ON {SCHEMA}.repin_orders (ordered_at) WHERE done_at IS NULL""",
        f"CREATE INDEX IF NOT EXISTS repin_orders_by_workflow ON {SCHEMA}.repin_orders (workflow_id)",
    ),
)


async def migrate(conn: asyncpg.Connection) -> None:
    await migrations.migrate(
        conn,
        schema=SCHEMA,
        component="rollouts",
        migrations=[*migrations.baseline(DDL), REPINS, REPIN_ORDERS],
    )


# -- policies and their changes -------------------------------------------------------------


async def policy(conn: asyncpg.Connection, service: str, *, lock: bool = False) -> RolloutChanged | None:
    """The service's current policy (``lock``: held until the transaction ends, so two
    changes of one service never both build on the same revision)."""
    body = await conn.fetchval(
        f"SELECT body::text FROM {SCHEMA}.policies WHERE service = $1{' FOR UPDATE' if lock else ''}", service
    )
    return RolloutChanged.model_validate_json(body) if body is not None else None


async def policies(conn: asyncpg.Connection) -> list[RolloutChanged]:
    rows = await conn.fetch(f"SELECT body::text AS body FROM {SCHEMA}.policies ORDER BY service")
    return [RolloutChanged.model_validate_json(r["body"]) for r in rows]


async def save_policy(conn: asyncpg.Connection, changed: RolloutChanged, at: datetime) -> None:
    """Record the change and make it the service's policy (inside the caller's transaction,
    with the event in its outbox)."""
    body = changed.model_dump_json()
    await conn.execute(
        f"""INSERT INTO {SCHEMA}.policies (service, revision, body, changed_at)
            VALUES ($1, $2, $3::jsonb, $4)
            ON CONFLICT (service) DO UPDATE
              SET revision = EXCLUDED.revision, body = EXCLUDED.body, changed_at = EXCLUDED.changed_at""",
        changed.service,
        changed.revision,
        body,
        at,
    )
    await conn.execute(
        f"""INSERT INTO {SCHEMA}.changes (service, revision, action, actor, reason, body, at)
            VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7)""",
        changed.service,
        changed.revision,
        changed.action,
        changed.changed_by,
        changed.reason,
        body,
        at,
    )


async def history(conn: asyncpg.Connection, service: str, limit: int = 100) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        f"""SELECT revision, action, actor, reason, body::text AS body, at FROM {SCHEMA}.changes
            WHERE service = $1 ORDER BY revision DESC LIMIT $2""",
        service,
        limit,
    )
    return [
        {
            "revision": r["revision"],
            "action": r["action"],
            "actor": r["actor"],
            "reason": r["reason"],
            "at": r["at"].isoformat(),
            "policy": json.loads(r["body"]),
        }
        for r in rows
    ]


# -- what happened to the workflows (effects of the handlers) ---------------------------------


@dataclass(frozen=True)
class Assignment:
    release: str
    workflow_type: str
    ended: str | None


@dataclass(frozen=True)
class RecordPins:
    """A workflow started, pinned to these releases."""

    workflow_id: str
    workflow_type: str
    pins: dict[str, str]
    started_at: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.executemany(
            f"""INSERT INTO {SCHEMA}.assignments (workflow_id, service, release, workflow_type, started_at)
                VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING""",
            [(self.workflow_id, s, r, self.workflow_type, self.started_at) for s, r in self.pins.items()],
        )


@dataclass(frozen=True)
class RecordEnd:
    workflow_id: str
    outcome: str
    ended_at: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"""INSERT INTO {SCHEMA}.endings (workflow_id, outcome, ended_at) VALUES ($1, $2, $3)
                ON CONFLICT DO NOTHING""",
            self.workflow_id,
            self.outcome,
            self.ended_at,
        )


@dataclass(frozen=True)
class RecordFailure:
    """A dead letter or a review raised by one release for a workflow."""

    event_id: uuid.UUID
    workflow_id: str
    service: str
    release: str
    category: str
    dead_letter: bool
    at: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"""INSERT INTO {SCHEMA}.failures
                  (event_id, workflow_id, service, release, category, dead_letter, at)
                VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING""",
            self.event_id,
            self.workflow_id,
            self.service,
            self.release,
            self.category,
            self.dead_letter,
            self.at,
        )


@dataclass(frozen=True)
class RecordReport:
    event_id: uuid.UUID
    report: ReleaseReported

    async def apply(self, conn: asyncpg.Connection) -> None:
        r = self.report
        await conn.execute(
            f"""INSERT INTO {SCHEMA}.reports
                  (event_id, service, release, instance, window_end, steps, p50_ms, p99_ms)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING""",
            self.event_id,
            r.service,
            r.release,
            r.instance,
            r.window_end,
            r.steps,
            r.p50_ms,
            r.p99_ms,
        )


@dataclass(frozen=True)
class RecordRepinAnswer:
    """The owning release answered a move: the first answer stands (a release that reads
    the request after the move answers ``unchanged``); a move re-pins the workflow here too."""

    request_id: uuid.UUID
    workflow_id: str
    answer: RepinAnswered
    at: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        a = self.answer
        updated = await conn.execute(
            f"""UPDATE {SCHEMA}.repins SET outcome = $2, answered_by = $3, refusal = $4, answered_at = $5
                WHERE request_id = $1 AND outcome IS NULL""",
            self.request_id,
            a.outcome,
            a.from_release,
            a.reason,
            self.at,
        )
        if rows_affected(updated) and a.outcome == "repinned":
            await conn.execute(
                f"UPDATE {SCHEMA}.assignments SET release = $3 WHERE workflow_id = $1 AND service = $2",
                self.workflow_id,
                a.service,
                a.to_release,
            )


# -- moves to another release -------------------------------------------------------------------


async def assignment(conn: asyncpg.Connection, service: str, workflow_id: str) -> Assignment | None:
    row = await conn.fetchrow(
        f"""SELECT a.release, a.workflow_type, e.outcome AS ended FROM {SCHEMA}.assignments a
            LEFT JOIN {SCHEMA}.endings e ON e.workflow_id = a.workflow_id
            WHERE a.service = $1 AND a.workflow_id = $2""",
        service,
        workflow_id,
    )
    return Assignment(row["release"], row["workflow_type"], row["ended"]) if row is not None else None


async def add_repin(
    conn: asyncpg.Connection,
    request_id: uuid.UUID,
    request: RepinRequested,
    *,
    workflow_id: str,
    at: datetime,
) -> None:
    await conn.execute(
        f"""INSERT INTO {SCHEMA}.repins (request_id, service, workflow_id, from_release, to_release,
                                         requested_by, reason, requested_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8)""",
        request_id,
        request.service,
        workflow_id,
        request.from_release,
        request.to_release,
        request.requested_by,
        request.reason,
        at,
    )


@dataclass(frozen=True)
class RepinOrder:
    """An operator's order to move a workflow to another release (workflow.repin_ordered)."""

    order_id: uuid.UUID
    service: str
    workflow_id: str
    to_release: str
    requested_by: str
    reason: str
    ordered_at: datetime

    async def apply(self, conn: asyncpg.Connection) -> None:
        """Stored once (its event id), with the order's inbox row."""
        await conn.execute(
            f"""INSERT INTO {SCHEMA}.repin_orders
                  (order_id, service, workflow_id, to_release, requested_by, reason, ordered_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (order_id) DO NOTHING""",
            self.order_id,
            self.service,
            self.workflow_id,
            self.to_release,
            self.requested_by,
            self.reason,
            self.ordered_at,
        )


async def next_repin_order(conn: asyncpg.Connection, now: datetime) -> RepinOrder | None:
    """The oldest order not done yet and due (``now``), locked for this transaction
    (replicas skip it)."""
    row = await conn.fetchrow(
        f"""SELECT order_id, service, workflow_id, to_release, requested_by, reason, ordered_at
            FROM {SCHEMA}.repin_orders WHERE done_at IS NULL AND (retry_at IS NULL OR retry_at <= $1)
            ORDER BY ordered_at, order_id LIMIT 1 FOR UPDATE SKIP LOCKED""",
        now,
    )
    return RepinOrder(**dict(row)) if row is not None else None


async def repin_order_later(conn: asyncpg.Connection, order_id: uuid.UUID, at: datetime) -> None:
    await conn.execute(f"UPDATE {SCHEMA}.repin_orders SET retry_at = $2 WHERE order_id = $1", order_id, at)


async def repin_order_done(conn: asyncpg.Connection, order_id: uuid.UUID, at: datetime) -> None:
    await conn.execute(f"UPDATE {SCHEMA}.repin_orders SET done_at = $2 WHERE order_id = $1", order_id, at)


async def refused_repin(conn: asyncpg.Connection, order: RepinOrder, why: str, by: str, at: datetime) -> None:
    """An order the rollout service refused, in the moves' audit (the order's id, answered at
    once): nothing was asked of the service's releases."""
    await conn.execute(
        f"""INSERT INTO {SCHEMA}.repins (request_id, service, workflow_id, to_release, requested_by,
                                         reason, requested_at, outcome, answered_by, refusal, answered_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, 'refused', $8, $9, $10) ON CONFLICT DO NOTHING""",
        order.order_id,
        order.service,
        order.workflow_id,
        order.to_release,
        order.requested_by,
        order.reason,
        order.ordered_at,
        by,
        why,
        at,
    )


_REPIN_COLUMNS = """request_id, workflow_id, from_release, to_release, requested_by, reason,
                    requested_at, outcome, answered_by, refusal, answered_at"""


def _repin_json(r: Any) -> dict[str, Any]:
    return {
        "request_id": str(r["request_id"]),
        "workflow_id": r["workflow_id"],
        "from_release": r["from_release"],
        "to_release": r["to_release"],
        "requested_by": r["requested_by"],
        "reason": r["reason"],
        "requested_at": r["requested_at"].isoformat(),
        "outcome": r["outcome"] or "pending",
        "answered_by": r["answered_by"],
        "refusal": r["refusal"],
        "answered_at": r["answered_at"].isoformat() if r["answered_at"] else None,
    }


async def repin(conn: asyncpg.Connection, service: str, request_id: uuid.UUID) -> dict[str, Any] | None:
    row = await conn.fetchrow(
        f"SELECT {_REPIN_COLUMNS} FROM {SCHEMA}.repins WHERE service = $1 AND request_id = $2",
        service,
        request_id,
    )
    return _repin_json(row) if row is not None else None


async def repins(conn: asyncpg.Connection, service: str, limit: int = 100) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        f"""SELECT {_REPIN_COLUMNS} FROM {SCHEMA}.repins WHERE service = $1
            ORDER BY requested_at DESC, request_id LIMIT $2""",
        service,
        limit,
    )
    return [_repin_json(r) for r in rows]


# -- status ----------------------------------------------------------------------------------

_FAILING = sorted(FAILING_CATEGORIES)


async def rollout_started(conn: asyncpg.Connection, service: str) -> datetime | None:
    """When the service's current rollout started (its latest ``start``)."""
    at: datetime | None = await conn.fetchval(
        f"SELECT max(at) FROM {SCHEMA}.changes WHERE service = $1 AND action = 'start'", service
    )
    return at


async def outcomes(conn: asyncpg.Connection, policy: RolloutChanged, since: datetime) -> dict[str, Outcomes]:
    """For the rollback rule: the workflows stable and canary took since the rollout started
    (of its workflow types, when it names some), and how many of them failed so far. A
    failure counts against the release its workflow is pinned to at that service."""
    releases = [r for r in (policy.stable, policy.canary) if r is not None]
    rows = await conn.fetch(
        f"""SELECT a.release, count(*) AS workflows,
                   count(*) FILTER (WHERE f.failing) AS failed,
                   count(*) FILTER (WHERE f.dead) AS dead_lettered
            FROM {SCHEMA}.assignments a
            LEFT JOIN LATERAL (
              SELECT bool_or(x.category = ANY($3::text[])) AS failing, bool_or(x.dead_letter) AS dead
              FROM {SCHEMA}.failures x WHERE x.workflow_id = a.workflow_id AND x.service = a.service
            ) f ON true
            WHERE a.service = $1 AND a.release = ANY($2::text[]) AND a.started_at >= $4
              AND (cardinality($5::text[]) = 0 OR a.workflow_type = ANY($5::text[]))
            GROUP BY a.release""",
        policy.service,
        releases,
        _FAILING,
        since,
        list(policy.workflow_types),
    )
    found = {
        r["release"]: Outcomes(r["release"], r["workflows"], r["failed"], r["dead_lettered"]) for r in rows
    }
    return {release: found.get(release, Outcomes(release)) for release in releases}


async def release_status(
    conn: asyncpg.Connection,
    service: str,
    current: RolloutChanged | None,
    *,
    now: datetime,
    running_within: timedelta,
    latency_window: timedelta,
) -> list[ReleaseStatus]:
    """Every release of ``service`` that has workflows pinned to it or reported lately."""
    statuses: dict[str, ReleaseStatus] = {}

    def of(release: str) -> ReleaseStatus:
        return statuses.setdefault(release, ReleaseStatus(release))

    for r in await conn.fetch(
        f"""SELECT a.release, count(*) AS workflows,
                   count(*) FILTER (WHERE e.workflow_id IS NULL) AS in_flight,
                   count(*) FILTER (WHERE e.workflow_id IS NOT NULL) AS ended,
                   count(*) FILTER (WHERE e.outcome = 'completed') AS completed,
                   count(*) FILTER (WHERE EXISTS (
                       SELECT 1 FROM {SCHEMA}.failures x WHERE x.workflow_id = a.workflow_id
                       AND x.service = a.service AND x.category = ANY($2::text[]))) AS failed,
                   count(*) FILTER (WHERE EXISTS (
                       SELECT 1 FROM {SCHEMA}.failures x WHERE x.workflow_id = a.workflow_id
                       AND x.service = a.service AND x.dead_letter)) AS dead_lettered
            FROM {SCHEMA}.assignments a
            LEFT JOIN {SCHEMA}.endings e ON e.workflow_id = a.workflow_id
            WHERE a.service = $1 GROUP BY a.release""",
        service,
        _FAILING,
    ):
        s = of(r["release"])
        s.workflows, s.in_flight, s.ended = r["workflows"], r["in_flight"], r["ended"]
        s.completed, s.failed, s.dead_lettered = r["completed"], r["failed"], r["dead_lettered"]
    # Failures by the release their workflow is pinned to, as the rule counts them.
    for r in await conn.fetch(
        f"""SELECT a.release, x.category, count(*) AS n FROM {SCHEMA}.failures x
            JOIN {SCHEMA}.assignments a ON a.workflow_id = x.workflow_id AND a.service = x.service
            WHERE x.service = $1 GROUP BY a.release, x.category""",
        service,
    ):
        of(r["release"]).failures[r["category"]] = r["n"]
    for r in await conn.fetch(
        f"""SELECT release,
                   count(DISTINCT instance) FILTER (WHERE window_end >= $2) AS replicas,
                   coalesce(sum(steps), 0) AS steps,
                   sum(p50_ms * steps) / nullif(sum(steps) FILTER (WHERE p50_ms IS NOT NULL), 0) AS p50,
                   sum(p99_ms * steps) / nullif(sum(steps) FILTER (WHERE p99_ms IS NOT NULL), 0) AS p99
            FROM {SCHEMA}.reports WHERE service = $1 AND window_end >= $3 GROUP BY release""",
        service,
        now - running_within,
        now - latency_window,
    ):
        s = of(r["release"])
        s.replicas, s.running, s.steps = r["replicas"], r["replicas"] > 0, int(r["steps"])
        s.p50_ms = round(r["p50"], 3) if r["p50"] is not None else None
        s.p99_ms = round(r["p99"], 3) if r["p99"] is not None else None
    for release in (current.stable, current.canary) if current is not None else ():
        if release is not None:
            of(release)
    for s in statuses.values():
        s.role = role_of(s.release, current, s.in_flight)
    order = {"stable": 0, "canary": 1, "draining": 2, "idle": 3}
    return sorted(statuses.values(), key=lambda s: (order[s.role], s.release))


async def in_flight(conn: asyncpg.Connection, service: str, release: str) -> list[str]:
    """Workflows pinned to ``release`` that have not ended (oldest first)."""
    rows = await conn.fetch(
        f"""SELECT a.workflow_id FROM {SCHEMA}.assignments a
            WHERE a.service = $1 AND a.release = $2
              AND NOT EXISTS (SELECT 1 FROM {SCHEMA}.endings e WHERE e.workflow_id = a.workflow_id)
            ORDER BY a.started_at, a.workflow_id""",
        service,
        release,
    )
    return [r["workflow_id"] for r in rows]


# -- retention -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutRetention(ErasedAsRetired):
    """A retired (or erased) workflow's assignments, ending, failures and moves go with it; release
    reports after ``keep_reports_s``. Policies and their changes stay: they are the audit of
    deployments, and name no workflow."""

    keep_reports_s: float = 86400.0
    workflow_tables = tuple(
        f"{SCHEMA}.{table}" for table in ("assignments", "endings", "failures", "repins", "repin_orders")
    )

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        done = await conn.execute(
            f"DELETE FROM {SCHEMA}.reports WHERE window_end < $1",
            now - timedelta(seconds=self.keep_reports_s),
        )
        return {f"{SCHEMA}.reports": rows_affected(done)}
