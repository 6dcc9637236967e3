"""commit: one transaction per handled record (inbox + checkpoint + outbox [+ effects]);
the Kafka offset is committed only after the chain returns.

Steps without effects go through a group commit (one statement for many lanes, see
``coalesce``); a step with effects gets its own transaction. What cannot be committed
because of what it holds (a value PostgreSQL refuses, an event too large for its topic,
an envelope the handler's overrides made invalid) becomes the record's dead letter, so
only the database being unavailable ever raises out of here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from chorus.base.clock import Clock
from chorus.base.errors import EventTooLargeError, PersistentError, RefusedByStoreError, caused_by_input
from chorus.base.faults import fault_point
from chorus.base.logs import fields
from chorus.base.metrics import Metrics
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.kernel.chain import Again, Done, Drain, Finish, Item, Via
from chorus.kernel.coalesce import Coalescer
from chorus.kernel.deadletters import failure
from chorus.kernel.guard import DeadLetterGuard
from chorus.kernel.messages import Messages
from chorus.kernel.results import MAX_FAILURES, DeadLetter, Dropped, Result, Retry, Review, Succeeded
from chorus.kernel.service import ServiceSpec
from chorus.kernel.steps.letters import Letters
from chorus.kernel.store import (
    CheckpointWrite,
    ConflictError,
    InboxOutcome,
    OutboxMessage,
    OutboxRow,
    Position,
    StepWrite,
    Store,
)

log = logging.getLogger("chorus.pipeline")

# A PersistentError here came from sealing what the outcome emits (a key destroyed by an
# erasure under way, a token of another subject): the record's, not the database's.
_UNCOMMITTABLE = (RefusedByStoreError, EventTooLargeError, ValidationError, PersistentError)


def _persistent(exc: BaseException) -> PersistentError:
    if isinstance(exc, PersistentError):
        return exc
    invalid = PersistentError(f"an event or timer this handler's outcome emits is invalid: {exc}")
    invalid.__cause__ = exc
    return invalid


class GuardTrippedError(RuntimeError):
    """Too many dead letters in a row: a bad deploy. The consumer must stop."""

    fatal = True


@dataclass
class Commit:
    spec: ServiceSpec[Any, Any]
    store: Store
    clock: Clock
    metrics: Metrics
    guard: DeadLetterGuard
    messages: Messages
    letters: Letters
    group: str
    on_committed: Callable[[list[OutboxRow]], None]
    """A step's outbox rows were committed: here they are, to publish from memory."""
    release: str | None = None
    """The release a workflow's first checkpoint is pinned to (chorus.releases.pinning)."""
    name: str = "commit"
    _commits: Coalescer[StepWrite, list[OutboxRow]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Concurrent lanes share round trips: commits go in batches.
        self._commits = Coalescer(self._batch)

    async def _batch(self, writes: list[StepWrite]) -> list[list[OutboxRow] | BaseException]:
        return await self.store.commit_steps(writes)

    async def close(self) -> None:
        await self._commits.close()

    async def __call__(self, item: Item) -> Done | Again:
        assert item.result is not None
        try:
            resolved = await self.commit(item, item.result)
        except ConflictError:
            log.info("checkpoint moved under us; reloading", extra=fields(via=item.via.value))
            return Again("load")
        if resolved and item.via is not Via.DRAIN:
            return Done(Finish.COMMITTED, then=(Drain(item.decoded.workflow_id),))
        return Done(Finish.COMMITTED)

    async def commit(self, handled: Item, result: Result) -> bool:
        """Commit the outcome; True when a park on this event was resolved (drain next).

        An outcome that cannot be committed because of what it holds (a value PostgreSQL
        refuses, an event too large for its topic, an envelope the handler's overrides made
        invalid) is the record's persistent failure: it is dead-lettered instead, and the
        partition goes on. Only the database being unavailable raises out of here.
        """
        try:
            return await self._commit_result(handled, result)
        except _UNCOMMITTABLE as exc:
            error = _persistent(exc)
        if not isinstance(result, DeadLetter):
            log.error(
                "the outcome cannot be committed; dead-lettering the record", extra=fields(error=repr(error))
            )
            self.metrics.failures.labels(error.category, handled.decoded.event_type).inc()
            try:
                return await self._commit_result(handled, DeadLetter(error, error.category))
            except _UNCOMMITTABLE as exc:
                error = _persistent(exc)
        # Not even the dead letter can be written under this event's identity (its attempt,
        # say, is out of range): dead-letter the raw record by its position, as undecodable
        # input is, and let go of it if it was parked.
        await self.letters.record(handled.record, error, parked_id=handled.parked_id)
        return False

    async def _commit_result(self, handled: Item, result: Result) -> bool:
        env = handled.decoded.envelope
        write = await self._step_write(handled, result, self.clock.now())
        effects = result.outcome.effects if isinstance(result, Succeeded) else ()
        if effects:
            rows = await self.store.commit_with_effects(write, effects)
        else:
            # One atomic statement (batched with other lanes'): a crash "after the inbox
            # insert" is a crash before that statement commits, which is where it fires.
            fault_point("after_inbox_insert")
            rows = await self._commits.submit(write)
        fault_point("after_db_commit")
        handled.published = tuple(m.event_id for m in write.messages)
        if isinstance(result, Succeeded | Review):
            self.guard.record_success()
        if rows:
            self.on_committed(rows)
        if isinstance(result, Succeeded) and result.outcome.ended:
            self.metrics.completions.labels(env.workflow_type, result.outcome.ended).inc()
        if isinstance(result, DeadLetter):
            self.metrics.dead_letters.labels(result.category).inc()
            log.error("dead-lettered", extra=fields(error=repr(result.error), attempt=handled.tries))
        if isinstance(result, Dropped):
            self.metrics.dropped.labels(env.event_type).inc()
            log.info("workflow ended; recorded this event, not handled", extra=fields(why=result.reason))
        # A park is resolved (this event's, or the workflow ended): the caller drains what waited.
        assert handled.frame is not None
        return handled.frame.parked_on is not None and write.parked_on is None

    async def _step_write(self, handled: Item, result: Result, now: datetime) -> StepWrite:
        """What the step commits: its inbox outcome, the checkpoint (state, and the event
        the workflow now waits on, if any) and the events it publishes."""
        rec, frame, attempt, traceparent = handled.record, handled.frame, handled.tries, handled.traceparent
        assert frame is not None and handled.route is not None
        env = handled.decoded.envelope
        messages: list[OutboxMessage] = []
        build = self.messages.rerunning(_rerun(handled))
        new_state = frame.state
        parked_on: uuid.UUID | None = None if frame.parked_on == env.event_id else frame.parked_on
        ended: str | None = None
        if isinstance(result, Succeeded):
            outcome_name = InboxOutcome.DONE
            if result.outcome.state is not None:
                new_state = result.outcome.state.model_dump(mode="json")
            messages = await build.outcome(env, result.outcome, now, traceparent)
            ended = self._ends(handled, result)
            if ended is not None:
                parked_on = None  # what waited behind an earlier event will be dropped
        elif isinstance(result, Dropped):
            outcome_name = InboxOutcome.DROPPED
        elif isinstance(result, Retry):
            outcome_name, parked_on = InboxOutcome.RETRYING, env.event_id
            history = [*handled.failures, failure(result.error, attempt, now, retry_in_s=result.wait_s)]
            messages = [
                await build.retry(env, rec, attempt, history[-MAX_FAILURES:], now, result.wait_s, traceparent)
            ]
            self.metrics.retries.labels(env.event_type).inc()
        elif isinstance(result, DeadLetter):
            outcome_name, parked_on = InboxOutcome.DEAD_LETTERED, env.event_id
            self._guard_dead_letter(result.error, env)
            history = [*handled.failures, failure(result.error, attempt, now)]
            messages = [
                await build.dead_letter(
                    rec,
                    result.error,
                    result.category,
                    attempt,
                    history[-MAX_FAILURES:],
                    now,
                    parent=env,
                    traceparent=traceparent,
                )
            ]
        else:
            outcome_name = InboxOutcome.REVIEW
            messages = [
                await build.review(env, result.errors, handled.route.semantic_attempts, now, traceparent)
            ]
        if not self.spec.per_workflow_order:
            parked_on = None  # nothing waits behind a retry or a dead letter here
        # Every step of a workflow that has a checkpoint bumps its revision, so a
        # decision taken on a state another replica has since moved is refused.
        if frame.revision is not None:
            checkpoint = CheckpointWrite.UPDATE
        elif new_state is not None or parked_on is not None or ended is not None:
            checkpoint = CheckpointWrite.INSERT
        else:
            checkpoint = CheckpointWrite.NONE
        return StepWrite(
            group=self.group,
            event_id=env.event_id,
            attempt=attempt,
            outcome=outcome_name,
            event_type=env.event_type,
            workflow_id=env.workflow_id,
            workflow_type=env.workflow_type,
            now=now,
            from_parked=handled.parked_id is not None,
            checkpoint=checkpoint,
            state=new_state,
            # The frame's: a checkpoint this code could not read is written back as it was.
            state_version=frame.state_version,
            expected_revision=frame.revision,
            parked_on=parked_on,
            subject_ref=env.subject_ref,
            messages=messages,
            parked_id=handled.parked_id,
            ended=ended,
            release=self.release,
            source=Position(handled.record.topic, handled.record.partition, handled.record.offset),
        )

    def _ends(self, handled: Item, result: Succeeded) -> str | None:
        """How the workflow ends with this step, for a service that keeps workflow state:
        the handler said so (``Outcome.ended``), or this is the workflow's end event."""
        if self.spec.state is None:
            return None  # platform services record every event, whatever the workflow did
        payload = handled.decoded.payload
        if isinstance(payload, WorkflowEnded):
            assert handled.frame is not None
            return handled.frame.ended or payload.outcome
        return result.outcome.ended

    def _guard_dead_letter(self, error: BaseException, env: Envelope) -> None:
        tripped = self.guard.record_dead_letter(
            error_class=type(error).__name__,
            event_type=env.event_type,
            workflow_id=env.workflow_id,
            caused_by_input=caused_by_input(error),
        )
        if tripped:
            raise GuardTrippedError(self.guard.describe())


def _rerun(handled: Item) -> str | None:
    """The reset whose point this event is, when it is handled again after it."""
    state = handled.loaded.state if handled.loaded is not None else None
    if state is None or state.rerun_point != handled.decoded.envelope.event_id:
        return None
    return state.rerun
