"""Rolling a workflow's checkpoint back through its history (SQL on the kernel's tables,
``state`` and ``state_history``, in the caller's transaction)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from chorus.base.db import ident
from chorus.kernel.store import Position


@dataclass(frozen=True)
class Rewound:
    """What a rewind did to one service's tables."""

    steps: int
    """Revisions of the checkpoint undone (0: no step of this service is past the point)."""
    to_revision: int | None
    """The revision the checkpoint went back to (None: to before its first step here)."""
    state_before: dict[str, Any] | None
    """The checkpoint as it was before the rewind (what a compensation looks at)."""
    state_after: dict[str, Any] | None
    forgotten: int
    """Inbox rows dropped: those events may be handled again."""
    point: Position | None
    """Where the point's event was read, when a step of this service handled it."""


@dataclass(frozen=True)
class Busy:
    """The workflow waits here on an event (a retry, a dead letter) or has parked events:
    a rewind now would race them."""

    reason: str


class ResetStore:
    """SQL for one service's schema. Methods take a connection so callers own transactions."""

    def __init__(self, service: str) -> None:
        self.schema = ident(service)

    async def rewind(
        self,
        conn: asyncpg.Connection,
        *,
        group: str,
        workflow_id: str,
        point: uuid.UUID,
        undone: Sequence[uuid.UUID],
        cause: uuid.UUID,
        cause_type: str,
        now: datetime,
    ) -> Rewound | Busy:
        """Roll the checkpoint of ``workflow_id`` back to the revision before the first step
        that handled ``point`` or any of ``undone`` (the events after it), and forget those
        events in ``group``'s inbox. The rewind is the checkpoint's next revision (a step
        decided on the old one cannot commit) and its history row names ``cause`` (the
        reset's request, of type ``cause_type``); the revisions it undid leave the history."""
        s = self.schema
        events = [point, *undone]
        row = await conn.fetchrow(
            f"""SELECT revision, state::text AS state, parked_on,
                       EXISTS (SELECT 1 FROM {s}.parked p WHERE p.workflow_id = $1) AS has_parked
                FROM {s}.state WHERE workflow_id = $1 FOR UPDATE""",
            workflow_id,
        )
        if row is not None and (row["parked_on"] is not None or row["has_parked"]):
            return Busy("a retry, a dead letter or a parked event of it waits here")
        first = await conn.fetchrow(
            f"""SELECT min(revision) AS revision FROM {s}.state_history
                WHERE workflow_id = $1 AND event_id = ANY($2::uuid[])""",
            workflow_id,
            events,
        )
        at = await conn.fetchrow(
            f"""SELECT topic, partition, "offset" FROM {s}.state_history
                WHERE workflow_id = $1 AND event_id = $2 AND topic IS NOT NULL
                ORDER BY revision LIMIT 1""",
            workflow_id,
            point,
        )
        forgotten = await conn.fetch(
            f"""DELETE FROM {s}.inbox WHERE consumer_group = $1 AND event_id = ANY($2::uuid[])
                RETURNING 1""",
            group,
            events,
        )
        position = Position(at["topic"], at["partition"], at["offset"]) if at is not None else None
        before = _state(row["state"]) if row is not None else None
        if row is None or first["revision"] is None:
            return Rewound(0, None, before, before, len(forgotten), position)
        r0, current = first["revision"], row["revision"]
        target = await conn.fetchrow(
            f"""SELECT revision, state::text AS state, state_version, ended FROM {s}.state_history
                WHERE workflow_id = $1 AND revision < $2 ORDER BY revision DESC LIMIT 1""",
            workflow_id,
            r0,
        )
        undone_steps = await conn.fetchval(
            f"""WITH gone AS (DELETE FROM {s}.state_history WHERE workflow_id = $1 AND revision >= $2
                              RETURNING 1)
                SELECT count(*) FROM gone""",
            workflow_id,
            r0,
        )
        # Back to the revision before, or to no state at all (the row stays: it holds the
        # workflow's pin to a release, chorus.releases.pinning).
        await conn.execute(
            f"""UPDATE {s}.state SET state = $2::jsonb, state_version = coalesce($3, state_version),
                       ended = $4, parked_on = NULL, revision = $5, updated_at = $6
                WHERE workflow_id = $1""",
            workflow_id,
            target["state"] if target is not None else None,
            target["state_version"] if target is not None else None,
            target["ended"] if target is not None else None,
            current + 1,
            now,
        )
        await conn.execute(
            f"""INSERT INTO {s}.state_history
                  (workflow_id, revision, event_id, event_type, state, state_version, parked_on, ended, at)
                SELECT workflow_id, revision, $2, $3, state, state_version, parked_on, ended, updated_at
                FROM {s}.state WHERE workflow_id = $1""",
            workflow_id,
            cause,
            cause_type,
        )
        after = _state(target["state"]) if target is not None else None
        return Rewound(
            int(undone_steps),
            target["revision"] if target is not None else None,
            before,
            after,
            len(forgotten),
            position,
        )


def _state(raw: str | None) -> dict[str, Any] | None:
    return json.loads(raw) if raw is not None else None
