"""The key service's table: one row per data key, wrapped; a destroyed key keeps its row
(the tombstone says when and why) but loses its material for good."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from chorus.base import migrations
from chorus.base.db import rows_affected
from chorus.kernel.service import DataRequest

SCHEMA = "key_service"
TABLE = f"{SCHEMA}.data_keys"

DDL = [
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        kid text PRIMARY KEY,
        region text NOT NULL,
        subject_hash text,
        workflow_id text NOT NULL,
        wrapped bytea,
        created_at timestamptz NOT NULL,
        destroyed_at timestamptz,
        destroyed_for text)""",
    # One live key per subject (or per workflow without a subject) and region.
    f"""CREATE UNIQUE INDEX IF NOT EXISTS data_keys_live ON {TABLE}
        (region, coalesce(subject_hash, 'workflow:' || workflow_id)) WHERE destroyed_at IS NULL""",
    f"CREATE INDEX IF NOT EXISTS data_keys_subject ON {TABLE} (subject_hash) WHERE subject_hash IS NOT NULL",
    f"CREATE INDEX IF NOT EXISTS data_keys_workflow ON {TABLE} (workflow_id)",
]
MIGRATIONS = [
    *migrations.baseline(DDL),
    migrations.Migration(
        2,
        "erased workflows",
        (
            # Workflows an erasure named: none gets a key again, so nothing sealed for them
            # after the erasure (a decision posted meanwhile) outlives it under a new key.
            f"""CREATE TABLE IF NOT EXISTS {SCHEMA}.erased_workflows (
                workflow_id text PRIMARY KEY,
                erased_for text NOT NULL,
                erased_at timestamptz NOT NULL)""",
        ),
    ),
]


class WorkflowErasedError(Exception):
    """The workflow's data was erased: no key is made for it again."""


async def migrate(conn: asyncpg.Connection) -> None:
    await migrations.migrate(conn, schema=SCHEMA, component="keys", migrations=MIGRATIONS)


async def live_key(
    conn: asyncpg.Connection,
    *,
    kid: str,
    region: str,
    subject_hash: str | None,
    workflow_id: str,
    wrapped: bytes,
    now: datetime,
) -> tuple[str, bytes]:
    """The scope's live key: the one proposed (``kid``, ``wrapped``) unless another
    replica or an earlier call created one first."""
    async with conn.transaction():
        erased = await conn.fetchval(
            f"SELECT erased_for FROM {SCHEMA}.erased_workflows WHERE workflow_id = $1", workflow_id
        )
        if erased is not None:
            raise WorkflowErasedError(f"workflow {workflow_id}'s data was erased ({erased})")
        inserted = await conn.fetchrow(
            f"""INSERT INTO {TABLE} (kid, region, subject_hash, workflow_id, wrapped, created_at)
                VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING kid, wrapped""",
            kid,
            region,
            subject_hash,
            workflow_id,
            wrapped,
            now,
        )
        if inserted is not None:
            return inserted["kid"], inserted["wrapped"]
        found = await conn.fetchrow(
            f"""SELECT kid, wrapped FROM {TABLE} WHERE destroyed_at IS NULL AND region = $1
                AND coalesce(subject_hash, 'workflow:' || workflow_id) = coalesce($2, 'workflow:' || $3)""",
            region,
            subject_hash,
            workflow_id,
        )
    assert found is not None, "a live key conflicted and is gone: the unique index guarantees one"
    return found["kid"], found["wrapped"]


async def existing_key(
    conn: asyncpg.Connection, *, region: str, subject_hash: str | None, workflow_id: str
) -> tuple[str, bytes] | None:
    """The scope's live key, if it has one and the workflow was not erased."""
    found = await conn.fetchrow(
        f"""SELECT kid, wrapped FROM {TABLE} WHERE destroyed_at IS NULL AND region = $1
              AND coalesce(subject_hash, 'workflow:' || workflow_id) = coalesce($2, 'workflow:' || $3)
              AND NOT EXISTS (SELECT 1 FROM {SCHEMA}.erased_workflows WHERE workflow_id = $3)""",
        region,
        subject_hash,
        workflow_id,
    )
    return (found["kid"], found["wrapped"]) if found is not None else None


async def find(conn: asyncpg.Connection, kid: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT kid, wrapped, destroyed_at, subject_hash, workflow_id FROM {TABLE} WHERE kid = $1", kid
    )


class KeyShredding:
    """The service's own data, as erasure and retention reach it: keys are destroyed (their
    material erased, the row kept as a tombstone), never deleted; a subject's key lives
    until its erasure (no time-based purge)."""

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        return {}

    async def erase(
        self, conn: asyncpg.Connection, subject_hash: str, workflow_ids: Sequence[str], request: DataRequest
    ) -> dict[str, int]:
        """The subject's keys, and the keys of its workflows."""
        why = f"erasure {request.request_id}"
        status = await conn.execute(
            f"""UPDATE {TABLE} SET wrapped = NULL, destroyed_at = $3, destroyed_for = $4
                WHERE destroyed_at IS NULL AND (subject_hash = $1 OR workflow_id = ANY($2::text[]))""",
            subject_hash,
            list(workflow_ids),
            request.at,
            why,
        )
        await conn.executemany(
            f"""INSERT INTO {SCHEMA}.erased_workflows (workflow_id, erased_for, erased_at)
                VALUES ($1, $2, $3) ON CONFLICT DO NOTHING""",
            [(w, why, request.at) for w in workflow_ids],
        )
        return {f"{TABLE} (destroyed)": rows_affected(status)}

    async def retire(
        self, conn: asyncpg.Connection, workflow_ids: Sequence[str], request: DataRequest
    ) -> dict[str, int]:
        """Keys of workflows past their lifetime that name no subject (a subject's key
        outlives any one of its workflows)."""
        status = await conn.execute(
            f"""UPDATE {TABLE} SET wrapped = NULL, destroyed_at = $2, destroyed_for = $3
                WHERE destroyed_at IS NULL AND subject_hash IS NULL AND workflow_id = ANY($1::text[])""",
            list(workflow_ids),
            request.at,
            f"retirement {request.request_id}",
        )
        return {f"{TABLE} (destroyed)": rows_affected(status)}
