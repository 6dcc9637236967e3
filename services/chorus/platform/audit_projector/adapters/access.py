"""The access log: every read of a workflow's personal data through the read API (the
gateway's reads included, on behalf of their caller). ``chorus audit access --subject``
lists a subject's. Rows name the subject by its hash, as the erasure ledger does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from chorus.base.db import ident


@dataclass(frozen=True)
class Access:
    at: datetime
    principal: str
    on_behalf_of: str | None
    workflow_id: str
    fields: list[str]
    route: str


async def record(
    conn: asyncpg.Connection,
    *,
    ledger: str,
    schema: str,
    accesses: list[tuple[str, list[str]]],
    principal: str,
    on_behalf_of: str | None,
    route: str,
    at: datetime,
) -> None:
    """Log reads of ``(workflow_id, fields)``; the subject comes from the workflow's status."""
    await conn.executemany(
        f"""INSERT INTO {ident(ledger)}.access_log
                (at, principal, on_behalf_of, workflow_id, subject_hash, fields, route)
            SELECT $1, $2, $3, $4,
                   (SELECT chorus.subject_hash(subject_ref) FROM {ident(schema)}.workflow_status
                     WHERE workflow_id = $4),
                   $5::text[], $6""",
        [(at, principal, on_behalf_of, workflow_id, fields, route) for workflow_id, fields in accesses],
    )


async def of_subject(conn: asyncpg.Connection, *, ledger: str, subject_hash: str, limit: int) -> list[Access]:
    rows = await conn.fetch(
        f"""SELECT at, principal, on_behalf_of, workflow_id, fields, route FROM {ident(ledger)}.access_log
            WHERE subject_hash = $1 ORDER BY at DESC, id DESC LIMIT $2""",
        subject_hash,
        limit,
    )
    return [Access(**dict(r)) for r in rows]
