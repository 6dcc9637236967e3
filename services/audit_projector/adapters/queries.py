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
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, ConfigDict

from audit_projector.adapters.projection import SCHEMA
from audit_projector.domain import (
    ATTENTION,
    TERMINAL,
    ApprovalState,
    Attention,
    PendingApproval,
    StatusView,
    WorkflowFacts,
    approval_state,
    attention,
)
from chorus.db import ident


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


PendingApprovalView = PendingApproval


class WorkflowStatusView(StatusView):
    """What ``GET /v1/workflows/{id}`` answers (without the timeline): the status
    columns and the workflow's id, and why it needs attention when it does."""

    workflow_id: str
    attention: Attention | None = None


class ApprovalTask(_View):
    """One line of ``GET /v1/approvals?assignee=<tier>``."""

    workflow_id: str
    workflow_type: str
    approval_id: str
    tier: str
    level: int
    waiting_until: datetime | None
    context: dict[str, Any] | str | None
    stage: str | None


class ApprovalView(ApprovalState):
    """One approval gate, whatever its state (what a decision is checked against), and
    its workflow."""

    workflow_id: str
    workflow_type: str


class TimelineEntry(_View):
    event_id: str
    origin: str
    """topic, or janitor / erasure for rows the projector wrote itself."""
    event_type: str
    schema_version: int
    producer: str
    occurred_at: datetime
    recorded_at: datetime
    trace_id: str | None
    causation_id: str | None
    decision: str | None
    actor: str | None
    external_call: str | None
    payload: dict[str, Any]


def _loads(value: str | None) -> Any:
    return json.loads(value) if value is not None else None


# -- typed ---------------------------------------------------------------------------------------


_STATUS_COLUMNS = """workflow_id, workflow_type, status, stage, waiting_for, waiting_until, attempts,
    outcome, outcome_reason, result::text AS result, started_at, ended_at, duration_s, last_event_at,
    events, subject_ref, pending_approval_id, pending_tier, pending_level,
    pending_context::text AS pending_context, facts::text AS facts"""
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


async def workflows_by_status(
    conn: asyncpg.Connection, status: str, *, schema: str = SCHEMA, limit: int = 100
) -> list[WorkflowStatusView]:
    """Workflows in ``status``, the longest-quiet first (``attention``: who waits longest)."""
    rows = await conn.fetch(
        f"""SELECT {_STATUS_COLUMNS} FROM {ident(schema)}.workflow_status WHERE status = $1
            ORDER BY last_event_at, workflow_id LIMIT $2""",
        status,
        limit,
    )
    return [_status(r) for r in rows]


def _status(r: asyncpg.Record) -> WorkflowStatusView:
    pending = None
    if r["pending_approval_id"] is not None:
        pending = PendingApprovalView(
            approval_id=r["pending_approval_id"],
            tier=r["pending_tier"],
            level=r["pending_level"],
            waiting_until=r["waiting_until"],
            context=_loads(r["pending_context"]),
        )
    row = {k: v for k, v in dict(r).items() if not k.startswith("pending_") and k != "facts"}
    row["result"] = _loads(row["result"])
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
                   pending_level, waiting_until, pending_context::text AS pending_context, stage
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


async def timeline_entries(
    conn: asyncpg.Connection, workflow_id: str, *, schema: str = SCHEMA
) -> list[TimelineEntry]:
    """The workflow's audit rows in the order they happened (ties by event id)."""
    rows = await conn.fetch(
        f"""SELECT event_id::text AS event_id, origin, event_type, schema_version, producer,
                   occurred_at, recorded_at, trace_id, causation_id, decision, actor,
                   external_call, payload::text AS payload
            FROM {ident(schema)}.audit_log WHERE workflow_id = $1
            ORDER BY occurred_at, event_id""",
        workflow_id,
    )
    return [TimelineEntry(**{**dict(r), "payload": _loads(r["payload"])}) for r in rows]
