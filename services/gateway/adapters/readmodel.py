"""Reads for the API, from the audit projection only (never another service's tables)."""

from __future__ import annotations

from typing import Any

import asyncpg

from audit_projector.adapters import queries


async def workflow(conn: asyncpg.Connection, workflow_id: str) -> dict[str, Any] | None:
    return await queries.workflow_status(conn, workflow_id)


async def timeline(conn: asyncpg.Connection, workflow_id: str) -> list[dict[str, Any]]:
    return await queries.timeline(conn, workflow_id)


async def approval(conn: asyncpg.Connection, approval_id: str) -> dict[str, Any] | None:
    return await queries.approval(conn, approval_id)


async def pending_approvals(conn: asyncpg.Connection, tier: str | None) -> list[dict[str, Any]]:
    return await queries.pending_approvals(conn, tier=tier)
