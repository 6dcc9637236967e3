"""Reads over the audit projection, behind the projector's HTTP API (``api.py``).

Plain functions over an asyncpg connection; no writes, no locks. They return typed
models; the API answers with their ``model_dump(mode="json")`` (date-times as ISO 8601).

The projection is eventually consistent: it lags the topics by the projector's consumer
lag (normally milliseconds), so a client that just submitted a decision may read the
previous status for a moment.

``schema`` names the projection (``audit_projector`` unless you read a replay).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg

from chorus.base.compat import StrEnum
from chorus.base.db import ident
from chorus.contracts.api.audit_projector import (
    ApprovalTask,
    ApprovalView,
    PendingApproval,
    TimelineEntry,
    WorkflowList,
    WorkflowStatusView,
    WorkflowSummary,
)
from chorus.contracts.search import BUILTIN, All, AnyOf, Condition, Not, Value
from chorus.platform.audit_projector.adapters.projection import SCHEMA
from chorus.platform.audit_projector.domain import (
    ATTENTION,
    TERMINAL,
    WorkflowFacts,
    approval_state,
    attention,
)


def _loads(value: str | None) -> Any:
    return json.loads(value) if value is not None else None


# -- typed ---------------------------------------------------------------------------------------


_STATUS_COLUMNS = """workflow_id, workflow_type, status, stage, waiting_for, waiting_until, attempts,
    outcome, outcome_reason, result::text AS result, started_at, ended_at, duration_s, last_event_at,
    events, subject_ref, submitter_ref, business_key, pending_approval_id, pending_tier, pending_level,
    pending_context::text AS pending_context, facts::text AS facts, attributes::text AS attributes,
    spend::text AS spend, streaming::text AS streaming"""
"""What a workflow's status view is read from (its facts tell why it needs attention)."""


async def status_view(
    conn: asyncpg.Connection, workflow_id: str, *, schema: str = SCHEMA
) -> WorkflowStatusView | None:
    """The workflow's status row, or None when the projection has never seen it (or the
    janitor removed it)."""
    r = await conn.fetchrow(
        f"""SELECT {_STATUS_COLUMNS} FROM {ident(schema)}.workflow_status WHERE workflow_id = $1""",
        workflow_id,
    )
    if r is None:
        return None
    return _status(r)


class Order(StrEnum):
    """How a list is sorted (and what its cursor points into)."""

    NEWEST = "newest"
    """started_at, newest first."""
    QUIETEST = "quietest"
    """last_event_at, the longest quiet first (who waits longest)."""


@dataclass(frozen=True)
class WorkflowFilter:
    """What ``GET /v1/workflows`` narrows to; every field optional, all of them ANDed."""

    workflow_type: str | None = None
    statuses: tuple[str, ...] = ()
    stage: str | None = None
    submitter_ref: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None
    search: str | None = None
    """A workflow id, or a business key (exact match on either)."""
    condition: Condition | None = None
    """A parsed search query (chorus.contracts.search) over the built-in
    columns and the search attributes."""


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _cursor(order: Order, at: datetime, workflow_id: str) -> str:
    micros = (at - EPOCH) // timedelta(microseconds=1)
    return f"{order.value}~{micros}~{workflow_id}"


def _after(cursor: str) -> tuple[Order, datetime, str]:
    """Where the page ``cursor`` points to starts (exclusive); it continues its own order."""
    kind, micros, workflow_id = cursor.split("~", 2)
    return Order(kind), EPOCH + timedelta(microseconds=int(micros)), workflow_id


async def list_workflows(
    conn: asyncpg.Connection,
    where: WorkflowFilter,
    *,
    order: Order = Order.NEWEST,
    cursor: str | None = None,
    limit: int = 50,
    schema: str = SCHEMA,
) -> WorkflowList:
    """A page of workflows matching ``where``, in ``order`` (a cursor's own, when given),
    after ``cursor`` (matching CURSOR_PATTERN). Keyset pagination: pages are stable while
    workflows start between requests (nothing repeats, nothing listed before is skipped)."""
    position = None
    if cursor:
        order, *position = _after(cursor)
    column = "started_at" if order is Order.NEWEST else "last_event_at"
    compare, direction = ("<", "DESC") if order is Order.NEWEST else (">", "ASC")
    params: list[Any] = [
        where.workflow_type,
        list(where.statuses),
        where.stage,
        where.submitter_ref,
        where.started_after,
        where.started_before,
        where.search,
        position[0] if position else None,
        position[1] if position else None,
        limit + 1,
    ]
    matched = condition_sql(where.condition, params) if where.condition is not None else "true"
    rows = await conn.fetch(
        f"""SELECT workflow_id, workflow_type, status, stage, waiting_for, waiting_until, outcome,
                   started_at, ended_at, duration_s, last_event_at, events, attempts, business_key,
                   pending_approval_id, pending_tier, pending_level, attributes::text AS attributes,
                   CASE WHEN status = '{ATTENTION}' THEN facts::text END AS facts
            FROM {ident(schema)}.workflow_status
            WHERE ($1::text IS NULL OR workflow_type = $1)
              AND (cardinality($2::text[]) = 0 OR status = ANY($2::text[]))
              AND ($3::text IS NULL OR stage = $3)
              AND ($4::text IS NULL OR submitter_ref = $4)
              AND ($5::timestamptz IS NULL OR started_at >= $5)
              AND ($6::timestamptz IS NULL OR started_at < $6)
              AND ($7::text IS NULL OR workflow_id = $7 OR business_key = $7)
              AND ($8::timestamptz IS NULL OR ({column}, workflow_id) {compare} ($8, $9::text))
              AND {matched}
            ORDER BY {column} {direction}, workflow_id {direction}
            LIMIT $10""",
        *params,
    )
    found = [
        WorkflowSummary(
            **{k: v for k, v in dict(r).items() if k not in ("facts", "attributes")},
            attributes=json.loads(r["attributes"]),
            attention=attention(WorkflowFacts.model_validate_json(r["facts"])) if r["facts"] else None,
        )
        for r in rows[:limit]
    ]
    last = found[-1] if len(rows) > limit else None
    next_cursor = None
    if last is not None:
        next_cursor = _cursor(
            order, last.started_at if order is Order.NEWEST else last.last_event_at, last.workflow_id
        )
    return WorkflowList(workflows=found, next_cursor=next_cursor)


def condition_sql(condition: Condition, params: list[Any]) -> str:
    """``condition`` as a boolean SQL expression over ``workflow_status``, its values (and
    attribute names) appended to ``params`` and referred to as ``$n``: nothing a user wrote
    is ever part of the SQL text. Every comparison is true or false, never NULL (one on an
    attribute a workflow lacks is false), so NOT negates it plainly."""

    def bind(value: Any, cast: str) -> str:
        params.append(value)
        return f"${len(params)}::{cast}"

    if isinstance(condition, Not):
        return f"NOT ({condition_sql(condition.condition, params)})"
    if isinstance(condition, All | AnyOf):
        joint = " AND " if isinstance(condition, All) else " OR "
        return "(" + joint.join(f"({condition_sql(c, params)})" for c in condition.conditions) + ")"
    op, values = condition.op, condition.values
    if condition.name in BUILTIN:
        # The name is one of BUILTIN's, not the user's text: a column of workflow_status.
        column = condition.name
        if op == "in":
            return f"COALESCE({column} = ANY({bind([str(v) for v in values], 'text[]')}), false)"
        sql_op = "<>" if op == "!=" else "="
        return f"COALESCE({column} {sql_op} {bind(str(values[0]), 'text')}, false)"
    cast = "numeric" if condition.type == "number" else "text"
    name = bind(condition.name, "text")

    def contains(value: Value) -> str:
        # Containment: what the GIN index on attributes answers.
        return f"attributes @> jsonb_build_object({name}, {bind(value, cast)})"

    if op == "=":
        return contains(values[0])
    if op == "in":
        return "(" + " OR ".join(contains(v) for v in values) + ")"
    if op == "!=":
        return f"(attributes ? {name} AND NOT {contains(values[0])})"
    # A range, on numbers only (search.parse refuses it on text).
    number = (
        f"(CASE WHEN jsonb_typeof(attributes -> {name}) = 'number' THEN (attributes ->> {name})::numeric END)"
    )
    return f"COALESCE({number} {op} {bind(values[0], 'numeric')}, false)"


def _status(r: asyncpg.Record) -> WorkflowStatusView:
    pending = None
    if r["pending_approval_id"] is not None:
        pending = PendingApproval(
            approval_id=r["pending_approval_id"],
            tier=r["pending_tier"],
            level=r["pending_level"],
            waiting_until=r["waiting_until"],
            context=_loads(r["pending_context"]),
        )
    row = {k: v for k, v in dict(r).items() if not k.startswith("pending_") and k != "facts"}
    row["result"] = _loads(row["result"])
    row["attributes"] = _loads(row["attributes"])
    row["spend"] = _loads(row["spend"])
    row["streaming"] = _loads(row["streaming"])
    # Only a workflow in attention needs its facts read (status polls are frequent).
    why = attention(WorkflowFacts.model_validate_json(r["facts"])) if r["status"] == ATTENTION else None
    return WorkflowStatusView(**row, pending_approval=pending, attention=why)


async def approval_tasks(
    conn: asyncpg.Connection, tier: str | None = None, *, schema: str = SCHEMA, limit: int = 200
) -> list[ApprovalTask]:
    """Open approvals (of workflows not ended), soonest deadline first; only ``tier``'s
    when given."""
    rows = await conn.fetch(
        f"""SELECT workflow_id, workflow_type, pending_approval_id, pending_tier,
                   pending_level, waiting_until, pending_context::text AS pending_context, stage,
                   (facts->'approvals'->pending_approval_id->'requested'->>'at')::timestamptz
                     AS requested_at
            FROM {ident(schema)}.workflow_status
            WHERE pending_approval_id IS NOT NULL AND NOT (status = ANY($1::text[]))
              AND ($2::text IS NULL OR pending_tier = $2)
            ORDER BY waiting_until NULLS LAST, workflow_id
            LIMIT $3""",
        sorted(TERMINAL),
        tier,
        limit,
    )
    return [
        ApprovalTask(
            workflow_id=r["workflow_id"],
            workflow_type=r["workflow_type"],
            approval_id=r["pending_approval_id"],
            tier=r["pending_tier"],
            level=r["pending_level"],
            waiting_until=r["waiting_until"],
            context=_loads(r["pending_context"]),
            stage=r["stage"],
            requested_at=r["requested_at"],
        )
        for r in rows
    ]


async def approval_view(
    conn: asyncpg.Connection, approval_id: str, *, schema: str = SCHEMA
) -> ApprovalView | None:
    """The gate ``approval_id``, decided or not; None when no workflow has it."""
    r = await conn.fetchrow(
        f"""SELECT workflow_id, workflow_type, facts::text AS facts
            FROM {ident(schema)}.workflow_status WHERE facts->'approvals' ? $1
            ORDER BY workflow_id LIMIT 1""",
        approval_id,
    )
    if r is None:
        return None
    state = approval_state(WorkflowFacts.model_validate_json(r["facts"]), approval_id)
    if state is None:
        return None
    return ApprovalView(workflow_id=r["workflow_id"], workflow_type=r["workflow_type"], **state.model_dump())


_ENTRY = """SELECT event_id::text AS event_id, origin, event_type, schema_version, producer,
                   producer_version, occurred_at, recorded_at, trace_id, causation_id, decision, actor,
                   external_call, payload::text AS payload, undone_by
            FROM {}.audit_log WHERE workflow_id = $1"""


async def timeline_entries(
    conn: asyncpg.Connection, workflow_id: str, *, schema: str = SCHEMA
) -> list[TimelineEntry]:
    """The workflow's audit rows in the order they happened (ties by event id)."""
    rows = await conn.fetch(f"{_ENTRY.format(ident(schema))} ORDER BY occurred_at, event_id", workflow_id)
    return [TimelineEntry(**{**dict(r), "payload": _loads(r["payload"])}) for r in rows]


async def signal_answer(
    conn: asyncpg.Connection,
    workflow_id: str,
    signal_id: str,
    answers: Sequence[str],
    *,
    schema: str = SCHEMA,
) -> TimelineEntry | None:
    """The handling service's answer to a signal (the first), None until projected: the row
    of the workflow of an answer type (``answers``: workflows.yaml's) stating the signal's
    id. A workflow has few rows: its own, found by its key, are searched."""
    row = await conn.fetchrow(
        f"""{_ENTRY.format(ident(schema))} AND payload->>'signal_id' = $2 AND event_type = ANY($3::text[])
            ORDER BY occurred_at, event_id LIMIT 1""",
        workflow_id,
        signal_id,
        list(answers),
    )
    return TimelineEntry(**{**dict(row), "payload": _loads(row["payload"])}) if row else None
