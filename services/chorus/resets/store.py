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
from chorus.kernel.store.postgres import ServiceStore


@dataclass(frozen=True)
class Checkpointed:
    """A checkpoint's state, and the state version that wrote it."""

    state: dict[str, Any] | None
    version: int


class HistoryGap(Exception):
    """The history does not reach back to the point: the rewind changes nothing."""


@dataclass(frozen=True)
class Rewound:
    """What a rewind did to one service's tables."""

    steps: int
    """Revisions of the checkpoint undone (0: no step of this service is past the point)."""
    to_revision: int | None
    """The revision the checkpoint went back to (None: to before its first step here)."""
    before: Checkpointed | None
    """The checkpoint as it was before the rewind (what a compensation looks at)."""
    after: Checkpointed | None
    fenced: int
    """Events after the point recorded as dropped here (skipped, should one still come)."""
    point: Position | None
    """Where the point's event was read, when a step of this service handled it."""


@dataclass(frozen=True)
class Pending:
    """A reset's event still to be handled again here."""

    point: Position | None
    """Where this service's step read the point (None: it handles a correction, or none)."""


@dataclass(frozen=True)
class Busy:
    """The workflow waits here on an event (a retry, a dead letter) or has parked events:
    a rewind now would race them."""

    reason: str


class ResetStore:
    """SQL for one service's schema. Methods take a connection so callers own transactions."""

    def __init__(self, service: str) -> None:
        self.schema = ident(service)
        self.kernel = ServiceStore(service)

    async def rewind(
        self,
        conn: asyncpg.Connection,
        *,
        group: str,
        workflow_id: str,
        point: uuid.UUID,
        undone: Sequence[uuid.UUID],
        reset_id: str,
        rerun_point: uuid.UUID,
        cause: uuid.UUID,
        cause_type: str,
        now: datetime,
    ) -> Rewound | Busy:
        """Roll the checkpoint of ``workflow_id`` back to the revision before the first step
        that handled ``point`` or any of ``undone`` (the events after it). In ``group``'s
        inbox, ``point`` is forgotten (it may be handled again) and each of ``undone`` is
        recorded as dropped: one still on its way is skipped when it comes, never handled on
        the rolled-back state. The rewind is the checkpoint's next revision (a step decided
        on the old one cannot commit); it names the reset and ``rerun_point``, the event
        handled again (the point, or its correction), whose steps emit new events; its
        history row names ``cause`` (the reset's request, of type ``cause_type``). The
        revisions it rolled back stay in the history, marked undone by the reset."""
        s = self.schema
        row = await conn.fetchrow(
            f"""SELECT revision, state::text AS state, state_version, parked_on, ended,
                       EXISTS (SELECT 1 FROM {s}.parked p WHERE p.workflow_id = $1) AS has_parked,
                       EXISTS (SELECT 1 FROM {s}.state_history h WHERE h.workflow_id = $1) AS has_history
                FROM {s}.state WHERE workflow_id = $1 FOR UPDATE""",
            workflow_id,
        )
        if row is not None:
            if row["parked_on"] is not None or row["has_parked"]:
                return Busy("a retry, a dead letter or a parked event of it waits here")
            if row["ended"] is not None:
                return Busy(f"the workflow ended here ({row['ended']})")
            if row["state"] is not None and not row["has_history"]:
                return Busy("it keeps no history of this workflow (its steps came before it kept one)")
        first = await conn.fetchval(
            f"""SELECT min(revision) FROM {s}.state_history
                WHERE workflow_id = $1 AND event_id = ANY($2::uuid[]) AND undone_by IS NULL""",
            workflow_id,
            [point, *undone],
        )
        position = await self.position(conn, workflow_id, point, undone_by=None)
        if position is not None:  # its step here runs again (a service that kept no state does not)
            await conn.execute(
                f"DELETE FROM {s}.inbox WHERE consumer_group = $1 AND event_id = $2", group, point
            )
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
        before = Checkpointed(_state(row["state"]), row["state_version"]) if row is not None else None
        if row is None or first is None:
            return Rewound(0, None, before, before, int(fenced), position)
        target = await conn.fetchrow(
            f"""SELECT revision, state::text AS state, state_version, ended FROM {s}.state_history
                WHERE workflow_id = $1 AND revision < $2 AND undone_by IS NULL
                ORDER BY revision DESC LIMIT 1""",
            workflow_id,
            first,
        )
        if target is None and first > 1:
            # Revisions before the first one kept (a release that kept no history took them).
            raise HistoryGap("its history of this workflow does not reach back before the point")
        steps = await conn.fetchval(
            f"""WITH undone AS (
                  UPDATE {s}.state_history SET undone_by = $3
                  WHERE workflow_id = $1 AND revision >= $2 AND undone_by IS NULL RETURNING 1)
                SELECT count(*) FROM undone""",
            workflow_id,
            first,
            reset_id,
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
            rerun_point,
        )
        await self.kernel.keep_revision(conn, workflow_id, cause, cause_type)
        after = Checkpointed(_state(target["state"]), target["state_version"]) if target is not None else None
        return Rewound(
            int(steps),
            target["revision"] if target is not None else None,
            before,
            after,
            int(fenced),
            position,
        )

    async def pending(
        self,
        conn: asyncpg.Connection,
        *,
        group: str,
        workflow_id: str,
        reset_id: str,
        point: uuid.UUID,
        rerun_point: uuid.UUID,
    ) -> Pending | None:
        """A reset rolled back here (the checkpoint names it) whose event (``rerun_point``:
        the point, or its correction) this service has not handled since (the process
        stopped between the two; the request, read again, finishes it): None once it has, or
        when it was refused or passed here. ``Pending.point``: where the step the reset
        rolled back read the point (None when no step here did)."""
        applied_here = await conn.fetchval(
            f"""SELECT NOT EXISTS (SELECT 1 FROM {self.schema}.inbox i
                                   WHERE i.consumer_group = $1 AND i.event_id = $2)
                FROM {self.schema}.state WHERE workflow_id = $3 AND rerun = $4""",
            group,
            rerun_point,
            workflow_id,
            reset_id,
        )
        if not applied_here:  # refused here, passed to another release, or handled again since
            return None
        return Pending(await self.position(conn, workflow_id, point, undone_by=reset_id))

    async def claimed(self, conn: asyncpg.Connection, group: str, event_id: uuid.UUID) -> bool:
        """Whether ``group`` took the request ``event_id`` already (its inbox row)."""
        return bool(
            await conn.fetchval(
                f"SELECT 1 FROM {self.schema}.inbox WHERE consumer_group = $1 AND event_id = $2",
                group,
                event_id,
            )
        )

    async def release_of(self, conn: asyncpg.Connection, workflow_id: str) -> str | None:
        """The release of this service the workflow is pinned to (chorus.releases), if any."""
        release: str | None = await conn.fetchval(
            f"SELECT release FROM {self.schema}.state WHERE workflow_id = $1", workflow_id
        )
        return release

    async def position(
        self, conn: asyncpg.Connection, workflow_id: str, point: uuid.UUID, *, undone_by: str | None
    ) -> Position | None:
        """Where this service's step read ``point`` (its first revision of the run the reset
        ``undone_by`` rolled back; None: of the live run)."""
        at = await conn.fetchrow(
            f"""SELECT topic, partition, "offset" FROM {self.schema}.state_history
                WHERE workflow_id = $1 AND event_id = $2 AND topic IS NOT NULL
                  AND undone_by IS NOT DISTINCT FROM $3
                ORDER BY revision LIMIT 1""",
            workflow_id,
            point,
            undone_by,
        )
        return Position(at["topic"], at["partition"], at["offset"]) if at is not None else None


def _state(raw: str | None) -> dict[str, Any] | None:
    return json.loads(raw) if raw is not None else None
