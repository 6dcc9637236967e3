"""The kernel's store in memory: the record path's tables as dictionaries, with the same
rules as the PostgreSQL store (``chorus.kernel.store.postgres``), for tests of the steps
and the chain that need no database — cosmicpython's fake unit of work, for the runtime.

Each method is atomic (nothing is awaited while it changes the tables), and refuses what
PostgreSQL refuses: an inbox claim of a finished event, a checkpoint that moved since it
was read, a first checkpoint of a workflow that has one. Effects (a platform service's own
tables) need PostgreSQL: a step with effects is refused here with a clear error.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from chorus.kernel.records import Record
from chorus.kernel.service import Effect
from chorus.kernel.store import (
    Checkpoint,
    CheckpointWrite,
    Claim,
    ConflictError,
    InboxOutcome,
    InboxRow,
    Loaded,
    OutboxMessage,
    OutboxRow,
    ParkedRow,
    StateRow,
    StepWrite,
)


@dataclass
class Inbox:
    outcome: InboxOutcome
    attempt: int
    event_type: str | None
    workflow_id: str | None


@dataclass
class Row:
    """A checkpoint row (``<service>.state``)."""

    workflow_type: str
    state: dict[str, Any] | None
    state_version: int
    revision: int
    parked_on: uuid.UUID | None
    subject_ref: str | None
    ended: str | None = None
    release: str | None = None
    repinned_from: tuple[str, ...] = ()


@dataclass
class MemoryStore:
    inbox: dict[tuple[str, uuid.UUID], Inbox] = field(default_factory=dict)
    state: dict[str, Row] = field(default_factory=dict)
    outbox: list[OutboxRow] = field(default_factory=list)
    parked: dict[int, tuple[str, ParkedRow]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- the Store port ------------------------------------------------------------------

    async def load_many(self, group: str, keys: Sequence[tuple[uuid.UUID, str]]) -> list[Loaded]:
        return [self._loaded(group, event_id, workflow_id) for event_id, workflow_id in keys]

    async def commit_steps(self, writes: Sequence[StepWrite]) -> list[list[OutboxRow] | BaseException]:
        results: list[list[OutboxRow] | BaseException] = []
        for write in writes:
            try:
                results.append(self._commit(write))
            except ConflictError as exc:
                results.append(exc)
        return results

    async def commit_with_effects(self, write: StepWrite, effects: Sequence[Effect]) -> list[OutboxRow]:
        raise TypeError(
            "an outcome with effects writes to the service's own tables, which need PostgreSQL "
            "(chorus.kernel.store.postgres.PgStore); the memory store runs handlers without effects"
        )

    async def checkpoint(self, checkpoint: Checkpoint) -> int:
        c, row = checkpoint, self.state.get(checkpoint.workflow_id)
        if c.expected_revision is None:
            if row is not None:
                raise ConflictError(f"workflow {c.workflow_id} changed concurrently")
            self.state[c.workflow_id] = Row(
                c.workflow_type, c.state, c.state_version, 1, c.parked_on, c.subject_ref, release=c.release
            )
            self._publish(c.messages)
            return 1
        if row is None or row.revision != c.expected_revision:
            raise ConflictError(f"workflow {c.workflow_id} changed concurrently")
        row.state, row.state_version, row.parked_on = c.state, c.state_version, c.parked_on
        row.subject_ref, row.revision = c.subject_ref or row.subject_ref, row.revision + 1
        self._publish(c.messages)
        return row.revision

    async def park(self, claim: Claim, record: Record) -> bool:
        assert claim.workflow_id is not None
        if not self._claim(claim):
            return False
        row_id = next(self._ids)
        parked = ParkedRow(
            row_id, record.topic, record.partition, record.offset, record.key, record.value or b"",
            list(record.headers), claim.attempt, record.timestamp_ms,
        )  # fmt: skip
        self.parked[row_id] = (claim.workflow_id, parked)
        return True

    async def next_parked(self, workflow_id: str) -> ParkedRow | None:
        row = self.state.get(workflow_id)
        if row is not None and row.parked_on is not None:
            return None
        waiting = sorted(p.id for wf, p in self.parked.values() if wf == workflow_id)
        return self.parked[waiting[0]][1] if waiting else None

    async def unpark(self, parked_id: int) -> None:
        self.parked.pop(parked_id, None)

    async def discard(self, *, group: str, event_id: uuid.UUID, workflow_id: str, now: datetime) -> None:
        inbox = self.inbox.get((group, event_id))
        if inbox is not None and inbox.outcome == InboxOutcome.DEAD_LETTERED:
            inbox.outcome = InboxOutcome.DISCARDED
        row = self.state.get(workflow_id)
        if row is not None and row.parked_on == event_id:
            row.parked_on, row.revision = None, row.revision + 1

    async def dead_letter(self, claim: Claim, message: OutboxMessage, parked_id: int | None) -> bool:
        claimed = self._claim(claim)
        if parked_id is not None:
            self.parked.pop(parked_id, None)
        if claimed:
            self._publish([message])
        return claimed

    async def workflows_to_drain(self, release: str | None, main: bool) -> list[str]:
        found = []
        for workflow_id in dict.fromkeys(wf for wf, _ in self.parked.values()):
            row = self.state.get(workflow_id)
            pinned = row.release if row is not None else None
            mine = release is None or pinned == release or (pinned is None and main)
            if (row is None or row.parked_on is None) and mine:
                found.append(workflow_id)
        return found

    # -- what a test looks at --------------------------------------------------------------

    def published(self, topic_suffix: str = "") -> list[OutboxRow]:
        """Outbox rows (every event the steps published), of topics ending in ``topic_suffix``."""
        return [row for row in self.outbox if row.topic.endswith(topic_suffix)]

    def outcome(self, group: str, event_id: uuid.UUID) -> InboxOutcome | None:
        inbox = self.inbox.get((group, event_id))
        return inbox.outcome if inbox is not None else None

    # -- the rules -------------------------------------------------------------------------

    def _loaded(self, group: str, event_id: uuid.UUID, workflow_id: str) -> Loaded:
        inbox = self.inbox.get((group, event_id))
        row = self.state.get(workflow_id)
        state = None
        if row is not None:
            state = StateRow(
                row.state,
                row.state_version,
                row.revision,
                row.parked_on,
                row.ended,
                row.release,
                row.repinned_from,
            )
        handed = row is not None and any(
            (g, event_id) in self.inbox and self.inbox[(g, event_id)].outcome in InboxOutcome.handed_over()
            for g in row.repinned_from
        )
        has_parked = any(wf == workflow_id for wf, _ in self.parked.values())
        return Loaded(InboxRow(inbox.outcome, inbox.attempt) if inbox else None, state, has_parked, handed)

    def _claimable(self, claim: Claim, from_parked: bool) -> bool:
        inbox = self.inbox.get((claim.group, claim.event_id))
        if inbox is None:
            return True
        retried = inbox.outcome in (InboxOutcome.RETRYING, InboxOutcome.DEAD_LETTERED)
        return (retried and inbox.attempt < claim.attempt) or (
            inbox.outcome == InboxOutcome.PARKED and from_parked
        )

    def _claim(self, claim: Claim, from_parked: bool = False) -> bool:
        if not self._claimable(claim, from_parked):
            return False
        self.inbox[(claim.group, claim.event_id)] = Inbox(
            claim.outcome, claim.attempt, claim.event_type, claim.workflow_id
        )
        return True

    def _commit(self, w: StepWrite) -> list[OutboxRow]:
        """One step, all or nothing: every condition is checked before anything changes."""
        row = self.state.get(w.workflow_id or "")
        if not self._claimable(w, w.from_parked):
            raise ConflictError("a duplicate of a finished event")
        if w.checkpoint is CheckpointWrite.INSERT and row is not None:
            raise ConflictError("the workflow has a checkpoint already")
        if w.checkpoint is CheckpointWrite.UPDATE and (row is None or row.revision != w.expected_revision):
            raise ConflictError("the checkpoint moved")
        moved = row is not None and None not in (row.release, w.release) and row.release != w.release
        if w.checkpoint is CheckpointWrite.NONE and moved:
            raise ConflictError("the workflow was moved to another release")
        self._claim(w, w.from_parked)
        assert w.workflow_id is not None or w.checkpoint is CheckpointWrite.NONE
        if w.checkpoint is CheckpointWrite.INSERT:
            self.state[w.workflow_id or ""] = Row(
                w.workflow_type, w.state, w.state_version, 1, w.parked_on, w.subject_ref, w.ended, w.release
            )
        elif w.checkpoint is CheckpointWrite.UPDATE and row is not None:
            self.state[w.workflow_id or ""] = replace(
                row,
                state=w.state,
                state_version=w.state_version,
                revision=row.revision + 1,
                parked_on=w.parked_on,
                subject_ref=w.subject_ref or row.subject_ref,
                ended=row.ended or w.ended,
                release=row.release or w.release,
            )
        if w.parked_id is not None:
            self.parked.pop(w.parked_id, None)
        return self._publish(w.messages)

    def _publish(self, messages: Sequence[OutboxMessage]) -> list[OutboxRow]:
        rows = [
            OutboxRow(next(self._ids), m.topic, m.key, m.value, list(m.headers), m.event_id) for m in messages
        ]
        self.outbox.extend(rows)
        return rows
