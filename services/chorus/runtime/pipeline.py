"""From one Kafka record to exactly one committed outcome. No Kafka in here.

decode -> route (own retry? not ours?) -> dedupe (inbox) -> ordering (parked?) ->
load checkpoint -> handler -> classify -> ONE transaction (inbox + checkpoint +
outbox [+ effects]) -> drain events that queued behind this one.

The caller commits the Kafka offset only after :meth:`Pipeline.handle` returns.
An exception out of ``handle`` means infrastructure failed (PostgreSQL down):
nothing was committed and the caller must try the same record again.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

import asyncpg
from pydantic import BaseModel, ValidationError

from chorus.clock import Clock
from chorus.codec import Event, decode
from chorus.db import data_error_blames_input, is_data_error
from chorus.deadletters import dead_letter_envelope, failure
from chorus.envelopes import child_envelope
from chorus.errors import (
    DecodeError,
    EventTooLargeError,
    HandlerTimeoutError,
    PersistentError,
    RefusedByStoreError,
    SemanticError,
    TransientError,
    UndecodableError,
    caused_by_input,
)
from chorus.faults import fault_point
from chorus.logs import fields, log_context
from chorus.metrics import Metrics
from chorus.outbox import outbox_message
from chorus.registry import Registry
from chorus.runtime.backoff import full_jitter
from chorus.runtime.coalesce import Coalescer
from chorus.runtime.datarequests import REQUESTS, DataRequests
from chorus.runtime.guard import DeadLetterGuard
from chorus.runtime.records import Record, record_from_original, to_original
from chorus.service import (
    CancelTimer,
    Context,
    Emit,
    On,
    Outcome,
    RescheduleTimer,
    ScheduleTimer,
    ServiceSpec,
    check_outcome,
)
from chorus.store import (
    DEAD_LETTERED,
    DONE,
    PARKED,
    RETRYING,
    REVIEW,
    CheckpointWrite,
    ConflictError,
    Loaded,
    OutboxMessage,
    ServiceStore,
    StateRow,
    StepWrite,
)
from chorus.strictjson import storable
from chorus.tracing import handling_span
from chorus_contracts.base import EventModel
from chorus_contracts.envelope import Envelope, ProducerRef
from chorus_contracts.platform import (
    EventDiscarded,
    Failure,
    FireTarget,
    RetryDue,
    ReviewRequested,
    SubjectErasureRequested,
    TimerCancel,
    TimerReschedule,
    TimerSchedule,
    WorkflowsRetired,
)

log = logging.getLogger("chorus.pipeline")

MAX_CONFLICT_RETRIES = 8
MAX_TEXT = 4000  # chorus_contracts.base.Text
MAX_FAILURES = 1000  # failures carried by retry.due and dead letters: the latest ones


class Via(Enum):
    """How a record reached the main path: what the inbox lets through and whether it may
    overtake records parked for its workflow."""

    DELIVERY = "delivery"
    """Read from its topic."""
    RETRY = "retry"
    """Fired by a durable retry (retry.due): a later attempt of the same event."""
    DRAIN = "drain"
    """Taken from the workflow's parked records, in arrival order, once it stopped waiting."""


@dataclass(frozen=True)
class _Succeeded:
    outcome: Outcome[Any]


@dataclass(frozen=True)
class _Retry:
    error: BaseException
    category: str
    wait_s: float


@dataclass(frozen=True)
class _DeadLetter:
    error: BaseException
    category: str


@dataclass(frozen=True)
class _Review:
    errors: list[str]


_Result = _Succeeded | _Retry | _DeadLetter | _Review


@dataclass
class _Frame:
    """Where one handling stands: the checkpoint revision it builds on."""

    revision: int | None
    state_version: int
    parked_on: uuid.UUID | None
    state: dict[str, Any] | None = None
    checkpoints: int = field(default=0)


@dataclass(frozen=True)
class _Handled:
    """One handled event on its way to the commit: what arrived and where it stands."""

    event: Event[EventModel]
    rec: Record
    route: On
    frame: _Frame
    attempt: int
    failures: list[Failure]
    traceparent: str
    parked_id: int | None


_UNCOMMITTABLE = (RefusedByStoreError, EventTooLargeError, ValidationError)


def _persistent(exc: BaseException) -> PersistentError:
    if isinstance(exc, PersistentError):
        return exc
    invalid = PersistentError(f"an event or timer this handler's outcome emits is invalid: {exc}")
    invalid.__cause__ = exc
    return invalid


def _refused(exc: BaseException) -> RefusedByStoreError:
    refused = RefusedByStoreError(f"PostgreSQL refused a value this record's outcome would store: {exc}")
    refused.__cause__ = exc
    # A value out of range or text it cannot hold comes from the input; a NOT NULL or
    # CHECK violation, or a value of the wrong type, is the code's (and counts for the guard).
    refused.caused_by_input = data_error_blames_input(exc)
    return refused


class GuardTrippedError(RuntimeError):
    """Too many dead letters in a row: a bad deploy. The consumer must stop."""

    fatal = True


class Pipeline:
    def __init__(
        self,
        *,
        spec: ServiceSpec[Any, Any],
        deps: Any,
        registry: Registry,
        store: ServiceStore,
        pool: asyncpg.Pool,
        clock: Clock,
        metrics: Metrics,
        group: str,
        guard: DeadLetterGuard,
        max_bytes: int,
        on_outbox: Any = None,
        rng: random.Random | None = None,
    ) -> None:
        self.spec = spec
        self.deps = deps
        self.registry = registry
        self.store = store
        self.pool = pool
        self.clock = clock
        self.metrics = metrics
        self.group = group
        self.guard = guard
        self.max_bytes = max_bytes
        self.on_outbox = on_outbox or (lambda: None)
        self.rng = rng or random.Random()
        self.producer = ProducerRef(service=spec.name, version=spec.version)
        self.accept = {**spec.consumes(), "retry.due": 1, "event.discarded": 1, **REQUESTS}
        self.data_requests = DataRequests(
            store=store,
            pool=pool,
            registry=registry,
            clock=clock,
            producer=self.producer,
            group=group,
            on_outbox=self.on_outbox,
        )
        # Concurrent lanes share round trips: loads and commits go in batches.
        self._loads: Coalescer[tuple[uuid.UUID, str], Loaded] = Coalescer(self._load_batch)
        self._commits: Coalescer[StepWrite, None] = Coalescer(self._commit_batch)

    def size_limit(self, topic: str) -> int:
        """The largest record accepted from ``topic`` (see Registry.size_limit)."""
        return self.registry.size_limit(topic, self.max_bytes)

    async def close(self) -> None:
        await self._loads.close()
        await self._commits.close()

    async def _load_batch(self, keys: list[tuple[uuid.UUID, str]]) -> list[Loaded | BaseException]:
        async with self.pool.acquire() as conn:
            return list(await self.store.load_many(conn, self.group, keys))

    async def _commit_batch(self, writes: list[StepWrite]) -> list[BaseException | None]:
        async with self.pool.acquire() as conn:
            try:
                await self.store.commit_steps(conn, writes)
                return [None] * len(writes)
            except ConflictError:
                if len(writes) == 1:
                    raise
            except Exception as exc:
                if not is_data_error(exc):
                    raise  # the database itself failed: every caller retries
                if len(writes) == 1:
                    return [_refused(exc)]
            # One member of the batch conflicted or carries a value PostgreSQL refuses
            # (rare): commit one by one, so only that one is affected.
            results: list[BaseException | None] = []
            for write in writes:
                try:
                    await self.store.commit_step(conn, write)
                    results.append(None)
                except ConflictError as exc:
                    results.append(exc)
                except Exception as exc:
                    if not is_data_error(exc):
                        raise
                    results.append(_refused(exc))
            return results

    # -- entry points -------------------------------------------------------------------

    async def handle(self, rec: Record) -> None:
        """Process one record to a committed outcome (or decide it is not ours)."""
        started = time.perf_counter()
        self.metrics.in_flight.inc()
        try:
            await self._handle(rec, started)
        finally:
            self.metrics.in_flight.dec()

    async def _handle(self, rec: Record, started: float) -> None:
        try:
            event = decode(rec.value, self.registry, accept=self.accept, max_bytes=self.size_limit(rec.topic))
        except DecodeError as exc:
            self.metrics.events_in.labels(rec.topic, "undecodable").inc()
            await self._dead_letter_record(rec, exc)
            return
        self.metrics.events_in.labels(rec.topic, event.event_type).inc()
        if isinstance(event.payload, RetryDue):
            await self._on_retry_due(rec, event.payload)
        elif isinstance(event.payload, EventDiscarded):
            await self._on_discarded(rec, event.envelope, event.payload)
        elif isinstance(event.payload, SubjectErasureRequested):
            await self.data_requests.erase(event.envelope, event.payload)
        elif isinstance(event.payload, WorkflowsRetired):
            await self._on_retired(rec, event.envelope, event.payload)
        elif self.spec.handler_for(event.event_type) is not None:
            await self._process(event, rec, attempt=event.envelope.attempt, failures=[], via=Via.DELIVERY)
        else:
            return  # another service's event on a shared topic
        self.metrics.handle_latency.labels(event.event_type).observe(time.perf_counter() - started)

    async def drain(self, workflow_id: str) -> None:
        """Process, in arrival order, records that waited while the workflow was parked."""
        while True:
            async with self.pool.acquire() as conn:
                row = await self.store.next_parked(conn, workflow_id)
                parked_on = await self.store.parked_on(conn, workflow_id)
            if row is None or parked_on is not None:
                return
            rec = Record(
                row.topic,
                row.partition,
                row.offset,
                row.key,
                row.value,
                tuple(row.headers),
                row.timestamp_ms,
            )
            try:
                event = decode(
                    rec.value, self.registry, accept=self.accept, max_bytes=self.size_limit(rec.topic)
                )
            except DecodeError:  # it decoded when parked; the registry changed under it
                event = None
            if event is None:
                async with self.pool.acquire() as conn, conn.transaction():
                    await self.store.unpark(conn, row.id)
                continue
            await self._process(event, rec, attempt=row.attempt, failures=[], via=Via.DRAIN, parked_id=row.id)

    # -- control messages -------------------------------------------------------------------

    async def _on_retry_due(self, rec: Record, due: RetryDue) -> None:
        if due.service != self.spec.name or due.consumer_group != self.group:
            return
        try:
            original = record_from_original(due.original)
        except ValueError as exc:  # base64 that does not decode: the control record is poison
            await self._dead_letter_record(
                rec, UndecodableError(f"/payload/original: {exc}", pointer="/payload/original")
            )
            return
        try:
            event = decode(
                original.value, self.registry, accept=self.accept, max_bytes=self.size_limit(original.topic)
            )
        except DecodeError as exc:
            await self._dead_letter_record(original, exc)
            return
        await self._process(event, original, attempt=due.attempt, failures=list(due.failures), via=Via.RETRY)

    async def _on_discarded(self, rec: Record, envelope: Envelope, msg: EventDiscarded) -> None:
        if msg.service != self.spec.name or msg.consumer_group != self.group:
            return
        try:
            discarded = uuid.UUID(msg.discarded_event_id)
        except ValueError:
            pointer = "/payload/discarded_event_id"
            await self._dead_letter_record(rec, UndecodableError("not an event id (a UUID)", pointer=pointer))
            return
        now = self.clock.now()
        async with self.pool.acquire() as conn, conn.transaction():
            await self.store.discard(
                conn, group=self.group, event_id=discarded, workflow_id=envelope.workflow_id, now=now
            )
        await self.drain(envelope.workflow_id)

    async def _on_retired(self, rec: Record, envelope: Envelope, msg: WorkflowsRetired) -> None:
        try:
            run_id = uuid.UUID(msg.run_id)
        except ValueError:
            await self._dead_letter_record(
                rec, UndecodableError("not a run id (a UUID)", pointer="/payload/run_id")
            )
            return
        await self.data_requests.retire(envelope, msg, run_id)

    # -- the main path ----------------------------------------------------------------------

    async def _process(
        self,
        event: Event[EventModel],
        rec: Record,
        *,
        attempt: int,
        failures: list[Failure],
        via: Via,
        parked_id: int | None = None,
    ) -> None:
        env = event.envelope
        route = self.spec.handler_for(env.event_type)
        assert route is not None
        with log_context(
            workflow_id=env.workflow_id,
            event_id=str(env.event_id),
            trace_id=env.traceparent[3:35],
            event_type=env.event_type,
        ):
            for _ in range(MAX_CONFLICT_RETRIES):
                loaded = await self._loads.submit((env.event_id, env.workflow_id))
                if not self._should_process(loaded, attempt, via):
                    self.metrics.duplicates.inc()
                    if parked_id is not None:  # handled elsewhere already; drop the parked copy
                        async with self.pool.acquire() as conn, conn.transaction():
                            await self.store.unpark(conn, parked_id)
                    return
                blocked = (
                    loaded.state is not None
                    and loaded.state.parked_on is not None
                    and loaded.state.parked_on != env.event_id
                )
                if via is not Via.DRAIN and blocked:
                    await self._park(event, rec, attempt)
                    return
                nothing_to_wait_on = loaded.state is None or loaded.state.parked_on is None
                if via is Via.DELIVERY and loaded.has_parked and nothing_to_wait_on:
                    # A crash interrupted an earlier drain; finish it before overtaking.
                    await self.drain(env.workflow_id)
                    continue
                frame = _Frame(
                    revision=loaded.state.revision if loaded.state else None,
                    state_version=self.spec.state_version,
                    parked_on=loaded.state.parked_on if loaded.state else None,
                    state=self._migrated(loaded.state),
                )
                try:
                    result, traceparent = await self._run(route, event, frame, attempt, failures)
                    handled = _Handled(event, rec, route, frame, attempt, failures, traceparent, parked_id)
                    resolved = await self._commit(handled, result)
                except ConflictError:
                    log.info("checkpoint moved under us; reloading", extra=fields(via=via.value))
                    continue
                if resolved and via is not Via.DRAIN:
                    await self.drain(env.workflow_id)
                return
            raise RuntimeError(
                f"workflow {env.workflow_id}: {MAX_CONFLICT_RETRIES} conflicting updates in a row"
            )

    def _should_process(self, loaded: Loaded, attempt: int, via: Via) -> bool:
        inbox = loaded.inbox
        if via is Via.DRAIN:
            return inbox is not None and inbox.outcome == PARKED
        if inbox is None:
            return True
        return inbox.outcome in (RETRYING, DEAD_LETTERED) and attempt > inbox.attempt

    def _migrated(self, row: StateRow | None) -> dict[str, Any] | None:
        if row is None or row.state is None:
            return None
        state, version = row.state, row.state_version
        while version < self.spec.state_version:
            step = self.spec.state_migrations.get(version)
            if step is None:
                raise PersistentError(
                    f"no state migration from v{version} to v{version + 1} in {self.spec.name}"
                )
            state, version = step(state), version + 1
        return state

    async def _run(
        self,
        route: On,
        event: Event[EventModel],
        frame: _Frame,
        attempt: int,
        failures: list[Failure],
    ) -> tuple[_Result, str]:
        """Call the handler, with semantic re-tries; classify how it ended."""
        env = event.envelope
        feedback: list[str] = []
        with handling_span(
            self.spec.name,
            env.event_type,
            env.traceparent,
            {
                "workflow.id": env.workflow_id,
                "event.id": str(env.event_id),
                "attempt": str(attempt),
            },
        ) as traceparent:
            state_model = self.spec.state
            for _ in range(route.semantic_attempts):
                try:
                    state = (
                        state_model.model_validate(frame.state)
                        if state_model is not None and frame.state is not None
                        else None
                    )
                    ctx: Context[Any] = Context(
                        service=self.spec.name,
                        deps=self.deps,
                        clock=self.clock,
                        envelope=env,
                        attempt=attempt,
                        feedback=list(feedback),
                        log=logging.LoggerAdapter(logging.getLogger(self.spec.name)),
                        _checkpoint=lambda s: self._checkpoint(env, frame, s),
                    )
                    try:
                        outcome = await asyncio.wait_for(
                            route.handler(event, state, ctx), timeout=route.timeout_s
                        )
                    except TimeoutError:
                        raise HandlerTimeoutError(
                            f"handler ran longer than its {route.timeout_s}s timeout"
                        ) from None
                    check_outcome(self.spec, outcome)
                    return _Succeeded(outcome), traceparent
                except SemanticError as exc:
                    self.metrics.failures.labels("semantic", env.event_type).inc()
                    feedback.extend(exc.errors)
                    log.warning(
                        "semantic failure; re-running with feedback",
                        extra=fields(errors=exc.errors),
                    )
                    continue
                except ConflictError:
                    raise
                except TransientError as exc:
                    return self._transient(
                        route, route.max_attempts, exc, "transient", attempt, failures
                    ), traceparent
                except PersistentError as exc:
                    self.metrics.failures.labels(exc.category, env.event_type).inc()
                    return _DeadLetter(exc, exc.category), traceparent
                except ValidationError as exc:
                    # A state or emitted model the handler built is invalid: the code is wrong.
                    self.metrics.failures.labels("persistent", env.event_type).inc()
                    return _DeadLetter(exc, "persistent"), traceparent
                except Exception as exc:
                    return self._transient(
                        route,
                        self.spec.unexpected_max_attempts,
                        exc,
                        "unexpected",
                        attempt,
                        failures,
                    ), traceparent
            return _Review(feedback), traceparent

    def _transient(
        self,
        route: On,
        max_attempts: int,
        exc: BaseException,
        category: str,
        attempt: int,
        failures: list[Failure],
    ) -> _Result:
        self.metrics.failures.labels(category, route.event.event_type).inc()
        if attempt >= max_attempts:
            return _DeadLetter(exc, category)
        retry_after = exc.retry_after_s if isinstance(exc, TransientError) else None
        wait = (
            retry_after
            if retry_after is not None
            else full_jitter(attempt, route.backoff_base_s, route.backoff_cap_s, self.rng)
        )
        log.warning(
            "transient failure; retrying later",
            extra=fields(error=repr(exc), attempt=attempt, retry_in_s=round(wait, 3)),
        )
        return _Retry(exc, category, wait)

    async def _checkpoint(self, env: Envelope, frame: _Frame, state: BaseModel) -> None:
        body = state.model_dump(mode="json")
        async with self.pool.acquire() as conn, conn.transaction():
            frame.revision = await self.store.write_state(
                conn,
                workflow_id=env.workflow_id,
                workflow_type=env.workflow_type,
                state=body,
                state_version=self.spec.state_version,
                expected_revision=frame.revision,
                parked_on=frame.parked_on,
                subject_ref=env.subject_ref,
                now=self.clock.now(),
            )
        frame.state = body
        frame.checkpoints += 1

    # -- the one transaction -----------------------------------------------------------------

    async def _commit(self, handled: _Handled, result: _Result) -> bool:
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
        if not isinstance(result, _DeadLetter):
            log.error(
                "the outcome cannot be committed; dead-lettering the record", extra=fields(error=repr(error))
            )
            self.metrics.failures.labels(error.category, handled.event.event_type).inc()
            try:
                return await self._commit_result(handled, _DeadLetter(error, error.category))
            except _UNCOMMITTABLE as exc:
                error = _persistent(exc)
        # Not even the dead letter can be written under this event's identity (its attempt,
        # say, is out of range): dead-letter the raw record by its position, as undecodable
        # input is, and let go of it if it was parked.
        await self._dead_letter_record(handled.rec, error, parked_id=handled.parked_id)
        return False

    async def _commit_result(self, handled: _Handled, result: _Result) -> bool:
        rec, frame, attempt, traceparent = handled.rec, handled.frame, handled.attempt, handled.traceparent
        env = handled.event.envelope
        now = self.clock.now()
        was_blocker = frame.parked_on == env.event_id
        messages: list[OutboxMessage] = []
        new_state = frame.state
        parked_on: uuid.UUID | None = None if was_blocker else frame.parked_on
        if isinstance(result, _Succeeded):
            outcome_name = DONE
            if result.outcome.state is not None:
                new_state = result.outcome.state.model_dump(mode="json")
            messages = self._outcome_messages(env, result.outcome, now, traceparent)
        elif isinstance(result, _Retry):
            outcome_name, parked_on = RETRYING, env.event_id
            history = [*handled.failures, failure(result.error, attempt, now, retry_in_s=result.wait_s)]
            messages = [
                self._retry_message(
                    env, rec, attempt, history[-MAX_FAILURES:], now, result.wait_s, traceparent
                )
            ]
            self.metrics.retries.labels(env.event_type).inc()
        elif isinstance(result, _DeadLetter):
            outcome_name, parked_on = DEAD_LETTERED, env.event_id
            self._guard_dead_letter(result.error, env)
            this_failure = failure(result.error, attempt, now)
            messages = [
                self._dead_letter_message(
                    rec,
                    result.error,
                    result.category,
                    attempt,
                    [*handled.failures, this_failure][-MAX_FAILURES:],
                    now,
                    parent=env,
                    traceparent=traceparent,
                )
            ]
        else:
            outcome_name = REVIEW
            messages = [
                self._review_message(env, result.errors, handled.route.semantic_attempts, now, traceparent)
            ]

        # Every step of a workflow that has a checkpoint bumps its revision, so a
        # decision taken on a state another replica has since moved is refused.
        if frame.revision is not None:
            checkpoint = CheckpointWrite.UPDATE
        elif new_state is not None or parked_on is not None:
            checkpoint = CheckpointWrite.INSERT
        else:
            checkpoint = CheckpointWrite.NONE
        write = StepWrite(
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
            state_version=self.spec.state_version,
            expected_revision=frame.revision,
            parked_on=parked_on,
            subject_ref=env.subject_ref,
            messages=messages,
            parked_id=handled.parked_id,
        )
        effects = result.outcome.effects if isinstance(result, _Succeeded) else ()
        if effects:
            try:
                async with self.pool.acquire() as conn, conn.transaction():
                    await self.store.commit_step(conn, write)
                    fault_point("after_inbox_insert")
                    for effect in effects:
                        await effect.apply(conn)
            except Exception as exc:
                if is_data_error(exc):
                    raise _refused(exc) from exc
                raise
        else:
            # One atomic statement (batched with other lanes'): a crash "after the inbox
            # insert" is a crash before that statement commits, which is where it fires.
            fault_point("after_inbox_insert")
            await self._commits.submit(write)
        fault_point("after_db_commit")
        if isinstance(result, _Succeeded | _Review):
            self.guard.record_success()
        if messages:
            self.on_outbox()
        if isinstance(result, _Succeeded) and result.outcome.ended:
            self.metrics.completions.labels(env.workflow_type, result.outcome.ended).inc()
        if isinstance(result, _DeadLetter):
            self.metrics.dead_letters.labels(result.category).inc()
            log.error("dead-lettered", extra=fields(error=repr(result.error), attempt=attempt))
        return was_blocker and parked_on is None

    async def _park(self, event: Event[EventModel], rec: Record, attempt: int) -> None:
        env = event.envelope
        now = self.clock.now()
        async with self.pool.acquire() as conn, conn.transaction():
            claimed = await self.store.claim_inbox(
                conn,
                group=self.group,
                event_id=env.event_id,
                attempt=attempt,
                outcome=PARKED,
                event_type=env.event_type,
                workflow_id=env.workflow_id,
                now=now,
            )
            if not claimed:
                return
            await self.store.park(
                conn,
                workflow_id=env.workflow_id,
                topic=rec.topic,
                partition=rec.partition,
                offset=rec.offset,
                key=rec.key,
                value=rec.value or b"",
                headers=rec.headers,
                attempt=attempt,
                timestamp_ms=rec.timestamp_ms,
                now=now,
            )
        log.info("workflow is waiting on an earlier event; parked this one")

    async def _dead_letter_record(
        self, rec: Record, exc: PersistentError, parked_id: int | None = None
    ) -> None:
        """A record that is not a valid event (or whose outcome cannot be stored under its
        event's identity): dead-letter it, once, with its bytes, keyed by its position.

        Poison input does not count towards the dead-letter guard: it says nothing
        about this deploy, and a flood of it from outside (or a replay over records
        dead-lettered before) must not stop the consumer. The guard watches handlers.
        """
        now = self.clock.now()
        self.metrics.failures.labels(exc.category, "undecodable").inc()
        poison_id = uuid.uuid5(
            uuid.NAMESPACE_URL, f"chorus:{self.group}:{rec.topic}:{rec.partition}:{rec.offset}"
        )
        this_failure = failure(exc, 1, now)
        message = self._dead_letter_message(rec, exc, exc.category, 1, [this_failure], now)
        async with self.pool.acquire() as conn, conn.transaction():
            claimed = await self.store.claim_inbox(
                conn,
                group=self.group,
                event_id=poison_id,
                attempt=1,
                outcome=DEAD_LETTERED,
                event_type=None,
                workflow_id=None,
                now=now,
            )
            if parked_id is not None:
                await self.store.unpark(conn, parked_id)
            if not claimed:
                self.metrics.duplicates.inc()  # dead-lettered before (offsets rewound)
                return
            await self.store.add_outbox(conn, [message])
        self.on_outbox()
        self.metrics.dead_letters.labels(exc.category).inc()
        log.error(
            "dead-lettered a record by its position",
            extra=fields(topic=rec.topic, partition=rec.partition, offset=rec.offset, error=str(exc)),
        )

    def _guard_dead_letter(self, error: BaseException, env: Envelope) -> None:
        tripped = self.guard.record_dead_letter(
            error_class=type(error).__name__,
            event_type=env.event_type,
            workflow_id=env.workflow_id,
            caused_by_input=caused_by_input(error),
        )
        if tripped:
            raise GuardTrippedError(self.guard.describe())

    # -- building outgoing messages --------------------------------------------------------------

    def _message(self, envelope: Envelope) -> OutboxMessage:
        return outbox_message(self.registry, envelope)

    def _child(
        self,
        parent: Envelope,
        event: EventModel,
        now: datetime,
        position: str,
        traceparent: str,
        **overrides: Any,
    ) -> Envelope:
        return child_envelope(
            parent,
            event,
            producer=self.producer,
            now=now,
            position=position,
            traceparent=traceparent,
            **overrides,
        )

    def _outcome_messages(
        self, env: Envelope, outcome: Outcome[Any], now: datetime, traceparent: str
    ) -> list[OutboxMessage]:
        messages: list[OutboxMessage] = []
        for index, item in enumerate(outcome.emit):
            # Events of one step are stamped a microsecond apart in emit order, so any
            # timeline (merging topics) orders them as the handler did.
            stamped = now + timedelta(microseconds=index)
            if isinstance(item, Emit):
                child = self._child(
                    env,
                    item.event,
                    stamped,
                    f"emit/{index}",
                    traceparent,
                    workflow_id=item.workflow_id,
                    workflow_type=item.workflow_type,
                    priority=item.priority,
                    idempotency_key=item.idempotency_key,
                    deadline=item.deadline,
                    subject_ref=item.subject_ref,
                )
            else:
                child = self._child(env, item, stamped, f"emit/{index}", traceparent)
            messages.append(self._message(child))
        for index, timer in enumerate(outcome.timers):
            timer_id = f"{self.spec.name}:{env.workflow_id}:{timer.timer_id}"
            command: EventModel
            if isinstance(timer, ScheduleTimer):
                fired = self._child(env, timer.event, now, f"timer/{timer.timer_id}", traceparent)
                command = TimerSchedule(
                    timer_id=timer_id,
                    due_at=timer.due_at,
                    fire=FireTarget(
                        topic=self.registry.physical_topic(fired.event_type, fired.priority),
                        key=fired.workflow_id,
                        value=fired.model_dump(mode="json"),
                    ),
                    purpose=timer.purpose if timer.purpose in _PURPOSES else "other",  # type: ignore[arg-type]
                )
            elif isinstance(timer, CancelTimer):
                command = TimerCancel(timer_id=timer_id, reason=timer.reason)
            else:
                assert isinstance(timer, RescheduleTimer)
                command = TimerReschedule(timer_id=timer_id, due_at=timer.due_at)
            messages.append(self._message(self._child(env, command, now, f"timer-cmd/{index}", traceparent)))
        return messages

    def _retry_message(
        self,
        env: Envelope,
        rec: Record,
        attempt: int,
        failures: list[Failure],
        now: datetime,
        wait_s: float,
        traceparent: str,
    ) -> OutboxMessage:
        due = RetryDue(
            service=self.spec.name,
            consumer_group=self.group,
            attempt=attempt + 1,
            original=to_original(rec),
            failures=failures,
        )
        fired = self._child(env, due, now, f"retry/{attempt + 1}", traceparent)
        schedule = TimerSchedule(
            timer_id=f"retry:{self.group}:{env.event_id}:{attempt + 1}",
            due_at=now + timedelta(seconds=wait_s),
            fire=FireTarget(
                topic=self.registry.physical_topic("retry.due"),
                key=env.workflow_id,
                value=fired.model_dump(mode="json"),
            ),
            purpose="retry",
        )
        return self._message(self._child(env, schedule, now, f"retry-timer/{attempt + 1}", traceparent))

    def _dead_letter_message(
        self,
        rec: Record,
        error: BaseException,
        category: str,
        attempts: int,
        failures: Sequence[Failure],
        now: datetime,
        *,
        parent: Envelope | None = None,
        traceparent: str | None = None,
    ) -> OutboxMessage:
        envelope = dead_letter_envelope(
            rec,
            error,
            category,  # type: ignore[arg-type]
            producer=self.producer,
            consumer_group=self.group,
            now=now,
            attempts=attempts,
            failures=failures,
            parent=parent,
            traceparent=traceparent,
        )
        return self._message(envelope)

    def _review_message(
        self, env: Envelope, errors: list[str], attempts: int, now: datetime, traceparent: str
    ) -> OutboxMessage:
        body = ReviewRequested(
            service=self.spec.name,
            reason=f"{env.event_type} output failed validation {attempts} times",
            validation_errors=[storable(e)[:MAX_TEXT] for e in errors[-20:]],
            attempts=attempts,
            original_event_type=env.event_type,
            original_event_id=str(env.event_id),
        )
        return self._message(self._child(env, body, now, "review", traceparent))


_PURPOSES = {"retry", "deadline", "escalation", "reminder", "other"}
