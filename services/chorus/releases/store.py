"""A workflow's pin in the service's checkpoint row: claiming it, recording what another
release owns, and moving it (SQL on the kernel's tables, in the callers' transactions)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from chorus.base.db import ident
from chorus.kernel.store import InboxOutcome

FINISHED = ", ".join(f"'{o}'" for o in InboxOutcome.finished())
"""Outcomes after which an event of a workflow will not be taken again in that group."""


@dataclass(frozen=True)
class PinRow:
    """What a move to another release looks at in the checkpoint row."""

    release: str | None
    revision: int
    ended: str | None
    parked_on: uuid.UUID | None
    has_parked: bool


class PinStore:
    """SQL for one service's schema. Methods take a connection so callers own transactions."""

    def __init__(self, service: str) -> None:
        self.schema = ident(service)

    async def claim_release(
        self,
        conn: asyncpg.Connection,
        *,
        workflow_id: str,
        workflow_type: str,
        release: str,
        state_version: int,
        now: datetime,
    ) -> str:
        """Pin a workflow nobody owns here yet to ``release``; returns the release it is
        pinned to (another's, when a release claimed or handled it first). A workflow
        without a checkpoint gets an empty one at revision 0 (its first handling still sees
        no state); a checkpoint from before pinning gets the release, and its next revision,
        so a step decided on the unpinned row cannot commit."""
        owner = await conn.fetchval(
            f"""INSERT INTO {self.schema}.state AS st
                  (workflow_id, workflow_type, state, state_version, revision, created_at,
                   updated_at, release)
                VALUES ($1, $2, NULL, $3, 0, $4, $4, $5)
                ON CONFLICT (workflow_id) DO UPDATE
                  SET release = EXCLUDED.release, revision = st.revision + 1, updated_at = $4
                  WHERE st.release IS NULL
                RETURNING release""",
            workflow_id,
            workflow_type,
            state_version,
            now,
            release,
        )
        if owner is None:
            owner = await conn.fetchval(
                f"SELECT release FROM {self.schema}.state WHERE workflow_id = $1", workflow_id
            )
        return str(owner)

    # -- moving a workflow to another release (chorus.releases.repin) ---------------------

    async def lock_pin(self, conn: asyncpg.Connection, workflow_id: str) -> None:
        """Serialise, for one workflow, a move to another release with every release's
        decision that an event of it is not theirs (until the transaction ends)."""
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"{self.schema}:{workflow_id}"
        )

    async def pin_of(
        self, conn: asyncpg.Connection, workflow_id: str, *, lock: bool = False
    ) -> PinRow | None:
        """The workflow's pin; ``lock``: held until the transaction ends, so that no release
        records an event of it as not its own meanwhile (see pass_event)."""
        row = await conn.fetchrow(
            f"""SELECT release, revision, ended, parked_on,
                       EXISTS (SELECT 1 FROM {self.schema}.parked p WHERE p.workflow_id = $1) AS has_parked
                FROM {self.schema}.state WHERE workflow_id = $1 {"FOR UPDATE" if lock else ""}""",
            workflow_id,
        )
        if row is None:
            return None
        return PinRow(row["release"], row["revision"], row["ended"], row["parked_on"], row["has_parked"])

    async def pass_event(
        self,
        conn: asyncpg.Connection,
        *,
        group: str,
        event_id: uuid.UUID,
        attempt: int,
        event_type: str,
        workflow_id: str,
        pinned_to: str | None,
        now: datetime,
    ) -> bool:
        """Record an event as another release's (``not_mine``); False when it was recorded
        already, or (``pinned_to``) the row no longer names that release: the workflow was
        moved meanwhile. The row's key-share lock waits for a move in progress (which holds
        the row FOR UPDATE) and sees its result, so no event is passed on a pin a move has
        just changed; the owner's own steps (no-key updates) do not wait for it."""
        guard = (
            f"""WITH pin AS (SELECT 1 FROM {self.schema}.state
                             WHERE workflow_id = $6 AND release = $7 FOR KEY SHARE)"""
            if pinned_to is not None
            else "WITH pin AS (SELECT 1 WHERE $7::text IS NULL)"
        )
        row = await conn.fetchrow(
            f"""{guard}
                INSERT INTO {self.schema}.inbox AS i
                  (consumer_group, event_id, attempt, outcome, event_type, workflow_id, processed_at)
                SELECT $1, $2, $3, '{InboxOutcome.NOT_MINE}', $4, $6, $5 WHERE EXISTS (SELECT 1 FROM pin)
                ON CONFLICT (consumer_group, event_id) DO UPDATE
                  SET attempt = EXCLUDED.attempt, outcome = EXCLUDED.outcome,
                      processed_at = EXCLUDED.processed_at
                  WHERE i.outcome IN ('{InboxOutcome.RETRYING}', '{InboxOutcome.DEAD_LETTERED}')
                    AND i.attempt < EXCLUDED.attempt
                RETURNING 1""",
            group,
            event_id,
            attempt,
            event_type,
            now,
            workflow_id,
            pinned_to,
        )
        return row is not None

    async def inbox_outcome(self, conn: asyncpg.Connection, group: str, event_id: uuid.UUID) -> str | None:
        outcome: str | None = await conn.fetchval(
            f"SELECT outcome FROM {self.schema}.inbox WHERE consumer_group = $1 AND event_id = $2",
            group,
            event_id,
        )
        return outcome

    async def pending_in(self, conn: asyncpg.Connection, group: str, workflow_id: str) -> int:
        """Events of the workflow a retry, a redrive or a drain of ``group`` will still take."""
        return int(
            await conn.fetchval(
                f"""SELECT count(*) FROM {self.schema}.inbox
                    WHERE workflow_id = $1 AND consumer_group = $2
                      AND outcome IN ('{InboxOutcome.RETRYING}', '{InboxOutcome.PARKED}',
                                      '{InboxOutcome.DEAD_LETTERED}')""",
                workflow_id,
                group,
            )
        )

    async def passed_unhandled(
        self,
        conn: asyncpg.Connection,
        *,
        workflow_id: str,
        passer: str,
        owner: str,
        event_types: Sequence[str],
    ) -> int:
        """Events of the workflow (of ``event_types``) that group ``passer`` recorded as not
        its own and group ``owner`` has not finished: moved now, nobody would take them."""
        return int(
            await conn.fetchval(
                f"""SELECT count(*) FROM {self.schema}.inbox t
                    WHERE t.workflow_id = $1 AND t.consumer_group = $2
                      AND t.outcome = '{InboxOutcome.NOT_MINE}' AND t.event_type = ANY($4::text[])
                      AND NOT EXISTS (SELECT 1 FROM {self.schema}.inbox o
                                      WHERE o.consumer_group = $3 AND o.event_id = t.event_id
                                        AND o.outcome IN ({FINISHED}))""",
                workflow_id,
                passer,
                owner,
                list(event_types),
            )
        )

    async def move_pin(
        self, conn: asyncpg.Connection, *, workflow_id: str, release: str, from_group: str, now: datetime
    ) -> None:
        """Pin the workflow's checkpoint to ``release``, remembering ``from_group`` (whose
        inbox tells the new owner what was taken before); its next revision, so a step the
        old owner decided before the move cannot commit."""
        await conn.execute(
            f"""UPDATE {self.schema}.state
                SET release = $2, revision = revision + 1, updated_at = $3,
                    repinned_from = array_append(coalesce(repinned_from, '{{}}'), $4::text)
                WHERE workflow_id = $1""",
            workflow_id,
            release,
            now,
            from_group,
        )
