"""Erasure and retirement in the service's own tables (the kernel's and its archive): SQL in
the data request's transaction (see chorus.privacy.datarequests)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from chorus.base.db import ident


class DataStore:
    def __init__(self, service: str) -> None:
        self.service = service
        self.schema = ident(service)

    async def erase_subject(
        self,
        conn: asyncpg.Connection,
        subject_hash: str,
        workflow_ids: Sequence[str] = (),
        *,
        keep_running: bool = False,
    ) -> tuple[dict[str, int], int]:
        """Delete the checkpoints of the ended workflows of the subject whose reference
        hashes to ``subject_hash`` (see SUBJECT_HASH_FUNCTION), their parked records and
        published outbox rows (they hold event bytes), and archived rows of the subject or
        of those workflows: (rows per ``<schema>.<table>``, workflows touched). Undispatched
        outbox rows stay: the relay still owes them to Kafka.

        With ``keep_running`` (a service that handles ``workflow.ended``), a workflow still
        running here keeps its checkpoint and parked records: the projector ends it
        (``workflow.ended`` ``erased``, on another topic, so it may come later than this
        request) and the end handler needs the state to compensate (release a budget). What
        it holds of the subject is sealed under the keys the key service destroys; retention
        removes the rows with the workflow's lifetime."""
        s = self.schema
        deleted = await conn.fetch(
            f"""DELETE FROM {s}.state WHERE chorus.subject_hash(subject_ref) = $1
                AND subject_ref IS NOT NULL AND (ended IS NOT NULL OR NOT $2) RETURNING workflow_id""",
            subject_hash,
            keep_running,
        )
        running: set[str] = (
            {
                r["workflow_id"]
                for r in await conn.fetch(
                    f"""SELECT workflow_id FROM {s}.state WHERE chorus.subject_hash(subject_ref) = $1
                        AND subject_ref IS NOT NULL AND ended IS NULL""",
                    subject_hash,
                )
            }
            if keep_running
            else set()
        )
        archived = await conn.fetch(
            f"""SELECT DISTINCT workflow_id FROM {s}.archive
                WHERE chorus.subject_hash(subject_ref) = $1 AND subject_ref IS NOT NULL""",
            subject_hash,
        )
        # Rows of the subject's workflows may be here without a checkpoint naming it (a
        # fired timer, a redriven record): the projection's ids cover those.
        ids = sorted({r["workflow_id"] for r in [*deleted, *archived]} | set(workflow_ids))
        touched = {r["workflow_id"] for r in deleted}
        rows = {"state": len(deleted)}
        statements = {
            # Each revision of a deleted checkpoint goes with it (sealed values in them too).
            "state_history": (
                f"""DELETE FROM {s}.state_history
                    WHERE workflow_id = ANY($1::text[]) AND workflow_id <> ALL($2::text[])""",
                (sorted(running),),
            ),
            "parked": (
                f"""DELETE FROM {s}.parked
                    WHERE workflow_id = ANY($1::text[]) AND workflow_id <> ALL($2::text[])""",
                (sorted(running),),
            ),
            "outbox": (
                f"""DELETE FROM {s}.outbox
                    WHERE workflow_id = ANY($1::text[]) AND dispatched_at IS NOT NULL""",
                (),
            ),
            "archive": (
                f"""DELETE FROM {s}.archive
                    WHERE workflow_id = ANY($1::text[]) OR chorus.subject_hash(subject_ref) = $2""",
                (subject_hash,),
            ),
        }
        for table, (sql, extra) in statements.items():
            gone = await conn.fetch(f"{sql} RETURNING workflow_id", ids, *extra)
            rows[table] = len(gone)
            touched.update(r["workflow_id"] for r in gone if r["workflow_id"] is not None)
        return self._qualified(rows), len(touched)

    async def retire(
        self,
        conn: asyncpg.Connection,
        workflow_ids: Sequence[str],
        *,
        run_id: uuid.UUID,
        archive: bool,
        now: datetime,
    ) -> tuple[dict[str, int], int]:
        """Remove the rows of workflows past their lifetime: checkpoints and their history, parked records,
        inbox rows and published outbox rows (archive mode copies checkpoints and parked
        records to ``archive`` first): (rows per ``<schema>.<table>``, workflows touched)."""
        s, ids = self.schema, list(workflow_ids)
        if archive:
            for table, subject in (("state", "t.subject_ref"), ("parked", "NULL")):
                await conn.execute(
                    f"""INSERT INTO {s}.archive (run_id, source, workflow_id, subject_ref, row, archived_at)
                        SELECT $1, $2, t.workflow_id, {subject}, to_jsonb(t), $3
                        FROM {s}.{table} t WHERE t.workflow_id = ANY($4::text[])""",
                    run_id,
                    f"{self.service}.{table}",
                    now,
                    ids,
                )
        touched: set[str] = set()
        rows: dict[str, int] = {}
        for table, where in (
            ("state", ""),
            ("state_history", ""),
            ("parked", ""),
            ("inbox", ""),
            # Undispatched rows still have to reach Kafka; the relay owns them.
            ("outbox", "AND dispatched_at IS NOT NULL"),
        ):
            deleted = await conn.fetch(
                f"DELETE FROM {s}.{table} WHERE workflow_id = ANY($1::text[]) {where} RETURNING workflow_id",
                ids,
            )
            rows[table] = len(deleted)
            touched.update(r["workflow_id"] for r in deleted)
        return self._qualified(rows), len(touched)

    def _qualified(self, rows: dict[str, int]) -> dict[str, int]:
        return {f"{self.service}.{table}": n for table, n in sorted(rows.items()) if n}
