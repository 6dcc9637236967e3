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
from chorus.kernel.store import InboxOutcome, Position


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
    fenced: int
    """Events after the point recorded as dropped here (skipped, should one still come)."""
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
        reset_id: str,
        cause: uuid.UUID,
        cause_type: str,
        now: datetime,
    ) -> Rewound | Busy:
        """Roll the checkpoint of ``workflow_id`` back to the revision before the first step
        that handled ``point`` or any of ``undone`` (the events after it). In ``group``'s
        inbox, ``point`` is forgotten (it may be handled again) and each of ``undone`` is
        recorded as dropped: one still on its way is skipped when it comes, never handled on
        the rolled-back state. The rewind is the checkpoint's next revision (a step decided
        on the old one cannot commit), names ``reset_id`` for the point's next steps, and its
        history row names ``cause`` (the reset's request, of type ``cause_type``); the
        revisions it undid leave the history."""
        s = self.schema
        row = await conn.fetchrow(
            f"""SELECT revision, state::text AS state, parked_on,
                       EXISTS (SELECT 1 FROM {s}.parked p WHERE p.workflow_id = $1) AS has_parked
                FROM {s}.state WHERE workflow_id = $1 FOR UPDATE""",
            workflow_id,
        )
        if row is not None and (row["parked_on"] is not None or row["has_parked"]):
            return Busy("a retry, a dead letter or a parked event of it waits here")
        first = await conn.fetchval(
            f"""SELECT min(revision) FROM {s}.state_history
                WHERE workflow_id = $1 AND event_id = ANY($2::uuid[])""",
            workflow_id,
            [point, *undone],
        )
        at = await conn.fetchrow(
            f"""SELECT topic, partition, "offset" FROM {s}.state_history
                WHERE workflow_id = $1 AND event_id = $2 AND topic IS NOT NULL
                ORDER BY revision LIMIT 1""",
            workflow_id,
            point,
        )
        await conn.execute(f"DELETE FROM {s}.inbox WHERE consumer_group = $1 AND event_id = $2", group, point)
        fenced = await conn.fetchval(
            f"""WITH fenced AS (
                  INSERT INTO {s}.inbox AS i
                    (consumer_group, event_id, attempt, outcome, workflow_id, processed_at)
                  SELECT $1, e, 1, '{InboxOutcome.DROPPED}', $3, $4 FROM unnest($2::uuid[]) AS e
                  ON CONFLICT (consumer_group, event_id) DO UPDATE
                    SET outcome = EXCLUDED.outcome, processed_at = EXCLUDED.processed_at
                  RETURNING 1)
                SELECT count(*) FROM fenced""",
            group,
            list(undone),
            workflow_id,
            now,
        )
        position = Position(at["topic"], at["partition"], at["offset"]) if at is not None else None
        before = _state(row["state"]) if row is not None else None
        if row is None or first is None:
            return Rewound(0, None, before, before, int(fenced), position)
        target = await conn.fetchrow(
            f"""SELECT revision, state::text AS state, state_version, ended FROM {s}.state_history
                WHERE workflow_id = $1 AND revision < $2 ORDER BY revision DESC LIMIT 1""",
            workflow_id,
            first,
        )
        steps = await conn.fetchval(
            f"""WITH gone AS (DELETE FROM {s}.state_history WHERE workflow_id = $1 AND revision >= $2
                              RETURNING 1)
                SELECT count(*) FROM gone""",
            workflow_id,
            first,
        )
        # Back to the revision before, or to no state at all (the row stays: it holds the
        # workflow's pin to a release, chorus.releases.pinning).
        await conn.execute(
            f"""UPDATE {s}.state SET state = $2::jsonb, state_version = coalesce($3, state_version),
                       ended = $4, parked_on = NULL, revision = revision + 1, updated_at = $5,
                       rerun = $6, rerun_point = $7
                WHERE workflow_id = $1""",
            workflow_id,
            target["state"] if target is not None else None,
            target["state_version"] if target is not None else None,
            target["ended"] if target is not None else None,
            now,
            reset_id,
            point,
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
        return Rewound(
            int(steps),
            target["revision"] if target is not None else None,
            before,
            _state(target["state"]) if target is not None else None,
            int(fenced),
            position,
        )


def _state(raw: str | None) -> dict[str, Any] | None:
    return json.loads(raw) if raw is not None else None
