"""A service's own tables, as the record path sees them: the values it reads and writes,
and :class:`Store`, the port the steps use (PostgreSQL: ``chorus.kernel.store.postgres``;
in memory, for tests of the steps without a database: ``chorus.testing.memory``).

- ``inbox``   one row per (consumer group, event id): the outcome of that event.
              A delivery whose row says it is done is a duplicate and is skipped.
- ``state``   one checkpoint per workflow, with the state model's schema version
              and a revision for optimistic concurrency; ``parked_on`` names the
              event the workflow waits on (a retry or a dead letter) so later
              events of that workflow queue behind it instead of overtaking it.
- ``outbox``  events to publish, written in the same transaction as the state.
- ``parked``  records that arrived while their workflow was parked, in order.
- ``state_history``  every revision of a checkpoint, with the event whose step wrote it
              and where that event was read (topic, partition, offset): what a reset
              from a step rolls back to and re-reads. Written in the checkpoint's own
              statement; removed with the workflow (retention, erasure).

Each method of :class:`Store` is one transaction: either all it writes commits, or
nothing does and it raises (the record is tried again).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any, Protocol

from chorus.base.compat import StrEnum
from chorus.kernel.records import Record
from chorus.kernel.service import Effect


class InboxOutcome(StrEnum):
    """What the inbox holds for an event (``inbox.outcome``). DONE, REVIEW and DISCARDED
    are final; RETRYING and DEAD_LETTERED let a later attempt through (a durable retry, a
    redrive); PARKED lets the drain through once."""

    DONE = "done"
    RETRYING = "retrying"
    DEAD_LETTERED = "dead_lettered"
    PARKED = "parked"
    REVIEW = "review_requested"
    DISCARDED = "discarded"
    DROPPED = "dropped"
    """Arrived after the workflow ended: recorded, never handled (see Pipeline)."""
    NOT_MINE = "not_mine"
    """The workflow is pinned to another release of this service (chorus.releases.pinning):
    recorded, never handled here."""

    @classmethod
    def finished(cls) -> tuple[InboxOutcome, ...]:
        """The final outcomes: nothing takes the event again in that group."""
        return (cls.DONE, cls.REVIEW, cls.DISCARDED, cls.DROPPED, cls.NOT_MINE)

    @classmethod
    def handed_over(cls) -> tuple[InboxOutcome, ...]:
        """Outcomes of the release a workflow was moved from that its new owner must not
        repeat: it took the step, or an operator discarded it. (A move waits until no retry
        or dead letter of it is pending there.)"""
        return (cls.DONE, cls.REVIEW, cls.DROPPED, cls.DISCARDED)


@dataclass(frozen=True)
class OutboxMessage:
    topic: str
    key: bytes | None
    value: bytes
    headers: Sequence[tuple[str, bytes]]
    event_id: uuid.UUID | None = None
    workflow_id: str | None = None

    @property
    def size(self) -> int:
        """Bytes of value, key and headers: what counts against a topic's record limit."""
        return record_size(self.value, self.key, self.headers)


def record_size(value: bytes, key: bytes | None, headers: Sequence[tuple[str, bytes]]) -> int:
    return len(value) + len(key or b"") + sum(len(k.encode()) + len(v) for k, v in headers)


@dataclass(frozen=True)
class OutboxRow:
    id: int
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    event_id: uuid.UUID | None = None

    @property
    def size(self) -> int:
        return record_size(self.value, self.key, self.headers)


@dataclass(frozen=True)
class InboxRow:
    outcome: InboxOutcome
    attempt: int


@dataclass(frozen=True)
class StateRow:
    state: dict[str, Any] | None
    state_version: int
    revision: int
    parked_on: uuid.UUID | None
    ended: str | None = None
    """How the workflow ended, once this service saw it end (its own outcome or a
    workflow.ended); later events for it are dropped."""
    release: str | None = None
    """The release of this service the workflow is pinned to (chorus.releases.pinning)."""
    repinned_from: tuple[str, ...] = ()
    """The consumer groups of the releases that owned the workflow before an operator moved
    it (chorus.releases.repin), oldest first."""
    rerun: str | None = None
    """The last reset of the workflow here (chorus.resets) whose point's event is
    ``rerun_point``: what that event's steps emit now are new events (their ids derive
    from the reset's too), never the first run's again."""
    rerun_point: uuid.UUID | None = None


@dataclass(frozen=True)
class Loaded:
    inbox: InboxRow | None
    state: StateRow | None
    has_parked: bool
    handled_before: bool = False
    """A release the workflow was moved from took this event before the move."""


@dataclass(frozen=True)
class ParkedRow:
    id: int
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    attempt: int
    timestamp_ms: int | None


class CheckpointWrite(IntEnum):
    """What a step does to the workflow's checkpoint (the value travels into the step SQL)."""

    NONE = 0
    """The workflow has no checkpoint and the step leaves none (nothing to order behind)."""
    INSERT = 1
    """The workflow's first checkpoint."""
    UPDATE = 2
    """The next revision of the checkpoint, if it is still at ``expected_revision``."""


class ConflictError(Exception):
    """Another replica (or an earlier delivery) changed the workflow first; reload and retry."""


@dataclass(frozen=True)
class Claim:
    """An inbox claim: (group, event) recorded with ``outcome`` unless finished before."""

    group: str
    event_id: uuid.UUID
    attempt: int
    outcome: InboxOutcome
    event_type: str | None
    workflow_id: str | None
    now: datetime


@dataclass(frozen=True)
class StepWrite(Claim):
    """Everything one handled event commits: its inbox claim (the outcome), checkpoint,
    outbox rows, unpark."""

    workflow_type: str
    from_parked: bool
    checkpoint: CheckpointWrite
    state: dict[str, Any] | None
    state_version: int
    expected_revision: int | None
    parked_on: uuid.UUID | None
    subject_ref: str | None
    messages: Sequence[OutboxMessage]
    parked_id: int | None
    ended: str | None = None
    """The workflow ends with this step (kept if it had ended before)."""
    release: str | None = None
    """The release that took this step: a first checkpoint is pinned to it."""
    source: Position | None = None
    """Where the event was read: its checkpoint's history row names it."""


@dataclass(frozen=True)
class Position:
    """A record's place in Kafka."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint written mid-handler (``ctx.checkpoint``): the workflow's next revision."""

    workflow_id: str
    workflow_type: str
    state: dict[str, Any] | None
    state_version: int
    expected_revision: int | None
    parked_on: uuid.UUID | None
    subject_ref: str | None
    now: datetime
    release: str | None = None
    """A first checkpoint is pinned to this release."""
    event_id: uuid.UUID | None = None
    """The event being handled: the history row of a mid-step checkpoint is its step's."""
    event_type: str | None = None
    messages: Sequence[OutboxMessage] = ()
    """Events published with it (``ctx.checkpoint(state, emit=...)``), in its transaction."""


class Store(Protocol):
    """The record path's transactions on the service's own tables."""

    async def load_many(self, group: str, keys: Sequence[tuple[uuid.UUID, str]]) -> list[Loaded]:
        """Inbox row, checkpoint and "has parked records" per (event id, workflow id), in order."""
        ...

    async def commit_steps(self, writes: Sequence[StepWrite]) -> list[list[OutboxRow] | BaseException]:
        """Each write in a transaction of its own (batched where the store can): its outbox
        rows, or why it did not commit (ConflictError, RefusedByStoreError). Raises when the
        store itself failed: then nothing committed."""
        ...

    async def commit_with_effects(self, write: StepWrite, effects: Sequence[Effect]) -> list[OutboxRow]:
        """The write and the service's own effects in one transaction."""
        ...

    async def checkpoint(self, checkpoint: Checkpoint) -> int:
        """Write the checkpoint unless another step moved it (ConflictError); its revision."""
        ...

    async def park(self, claim: Claim, record: Record) -> bool:
        """Record the event as parked and keep its record; False when it was finished before."""
        ...

    async def next_parked(self, workflow_id: str) -> ParkedRow | None:
        """The oldest record parked for the workflow, unless the workflow waits on an event."""
        ...

    async def unpark(self, parked_id: int) -> None: ...

    async def discard(self, *, group: str, event_id: uuid.UUID, workflow_id: str, now: datetime) -> None:
        """An operator gave up on a dead-lettered event: it is discarded, and the workflow
        waits on it no more."""
        ...

    async def dead_letter(self, claim: Claim, message: OutboxMessage, parked_id: int | None) -> bool:
        """A record dead-lettered by its position: claimed, let go of if parked, its letter
        in the outbox; False when it was dead-lettered before."""
        ...

    async def workflows_to_drain(self, release: str | None, main: bool) -> list[str]:
        """Workflows with parked records and nothing to wait on (a drain a crash interrupted)."""
        ...
