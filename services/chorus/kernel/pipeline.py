"""From one Kafka record to exactly one committed outcome. No Kafka in here.

The steps, each a small unit with typed values between them (``steps``):

    decode   bytes -> Event, or the record's dead letter (it is input, never a stall)
    route    control (retry.due, event.discarded), data requests (erasure, retention),
             this service's handler, or not ours (another service's event on a shared topic)
    dedupe   the inbox: an event finished before is skipped (``_admit``)
    order    a workflow waiting on an earlier event parks this one (``_park``), and
             drains what waited, in arrival order, once it stops waiting (``drain``)
    load     the checkpoint this handling builds on (a :class:`Frame`)
    handle   the handler, with semantic re-tries (``handling``)
    classify how it ended: a :data:`Result` (``handling``)
    commit   ONE transaction: inbox + checkpoint + outbox [+ effects] (``commit``)
    offset   the caller commits the Kafka offset only after :meth:`Pipeline.handle`
             returns: last, so a crash anywhere before means the record comes again.

An exception out of ``handle`` means infrastructure failed (PostgreSQL down): nothing
was committed and the caller must try the same record again.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from pydantic import ValidationError

from chorus.kernel.clock import Clock
from chorus.kernel.coalesce import Coalescer
from chorus.kernel.codec import Event, decode
from chorus.kernel.commit import GuardTrippedError, StepCommitter
from chorus.kernel.errors import DecodeError, PersistentError, UnauthorizedError, UndecodableError
from chorus.kernel.guard import DeadLetterGuard
from chorus.kernel.handling import HandlerCall
from chorus.kernel.logs import fields, log_context, personal_scope
from chorus.kernel.messages import Messages
from chorus.kernel.metrics import Metrics
from chorus.kernel.outbox import OutboxWriter
from chorus.kernel.records import Record, record_from_original
from chorus.kernel.service import ServiceSpec
from chorus.kernel.steps import DeadLetter, Dropped, Frame, Handled, Result, Via
from chorus.kernel.store import ConflictError, InboxOutcome, Loaded, OutboxRow, ServiceStore, StateRow
from chorus.observability import hoptrace
from chorus.privacy.crypto import KeyDestroyedError, Sealer
from chorus.privacy.datarequests import REQUESTS, DataRequests
from chorus.privacy.signing import Keys, Verifier
from chorus.releases.pinning import Pinning, Verdict
from chorus.releases.repin import Repins
from chorus.releases.report import ReleaseWindow
from chorus.releases.rollouts import MAIN_RELEASE, RolloutView
from chorus_contracts.base import EventModel, is_sealed
from chorus_contracts.envelope import Envelope, ProducerRef
from chorus_contracts.lifecycle import WorkflowEnded
from chorus_contracts.platform import (
    EventDiscarded,
    Failure,
    RetryDue,
    SubjectErasureRequested,
    WorkflowsRetired,
)
from chorus_contracts.registry import Registry
from chorus_contracts.rollouts import RepinRequested

__all__ = ["GuardTrippedError", "Pipeline"]

log = logging.getLogger("chorus.pipeline")

MAX_CONFLICT_RETRIES = 8
CONTROL = {
    RetryDue.event_type: RetryDue.version,
    EventDiscarded.event_type: EventDiscarded.version,
    RepinRequested.event_type: RepinRequested.version,
}
"""Messages addressed to one service's runtime on chorus.control."""


@dataclass
class Pipeline:
    spec: ServiceSpec[Any, Any]
    deps: Any
    registry: Registry
    store: ServiceStore
    pool: asyncpg.Pool
    clock: Clock
    metrics: Metrics
    group: str
    guard: DeadLetterGuard
    max_bytes: int
    on_outbox: Callable[[], None] = lambda: None
    """Outbox rows were committed: wake the relay."""
    on_committed: Callable[[list[OutboxRow]], None] = lambda _rows: None
    """A step committed these outbox rows: the relay publishes them from memory."""
    rng: random.Random = field(default_factory=random.Random)
    keys: Keys = field(default_factory=lambda: Keys(None, Verifier({}, {})))
    """This service's signer and the verifier of signed event types (chorus.privacy.signing)."""
    sealer: Sealer | None = None
    """Seals the personal data of what the service publishes, opens it for handlers that
    declare they read it (chorus.privacy.crypto)."""
    release: str = ""
    """This deployment's release label (``CHORUS_RELEASE``); empty: the main release, in the
    service's own consumer group (producer version: the service's version)."""
    rollouts: RolloutView | None = None
    """The rollout policies; with them, only the workflows pinned to this release are
    handled (chorus.releases.pinning). None: every workflow (a single release)."""
    base_group: str = ""
    """The service's consumer group (``group`` without the release); default: ``group``."""

    def __post_init__(self) -> None:
        self.producer = ProducerRef(service=self.spec.name, version=self.release or self.spec.version)
        self.identity = self.release or MAIN_RELEASE
        """What pins and checkpoint rows call this release."""
        self.pinning = (
            Pinning(self.spec.name, self.identity, named=bool(self.release), view=self.rollouts)
            if self.rollouts is not None
            else None
        )
        self.window = ReleaseWindow(self.clock.now(), self.rng)
        """This replica's steps since its last release report (chorus.releases.report)."""
        self.accept = {**self.spec.consumes(), **CONTROL, **REQUESTS}
        parts = {"store": self.store, "pool": self.pool, "clock": self.clock, "group": self.group}
        self.committer = StepCommitter(
            spec=self.spec,
            metrics=self.metrics,
            guard=self.guard,
            messages=Messages(
                self.spec, self.registry, self.producer, self.group, self.keys.signer, self.sealer
            ),
            on_outbox=self.on_outbox,
            on_committed=self.on_committed,
            release=self.identity if self.pinning is not None else None,
            **parts,
        )
        self.call = HandlerCall(
            self.spec, self.deps, self.clock, self.metrics, self.committer.checkpoint, self.rng, self.sealer
        )
        self.data_requests = DataRequests(
            outbox=OutboxWriter(self.store, self.registry, self.on_outbox, self.keys.signer, self.sealer),
            producer=self.producer,
            owned=self.spec.owned_data,
            compensates=self.spec.handler_for(WorkflowEnded.event_type) is not None,
            **parts,
        )
        self.repins = (
            Repins(
                outbox=self.data_requests.outbox,
                producer=self.producer,
                base_group=self.base_group or self.group,
                identity=self.identity,
                view=self.rollouts,
                state_version=self.spec.state_version,
                handled_types=tuple(self.spec.consumes()),
                **parts,
            )
            if self.rollouts is not None
            else None
        )
        # Concurrent lanes share round trips: loads go in batches.
        self._loads: Coalescer[tuple[uuid.UUID, str], Loaded] = Coalescer(self._load_batch)

    def size_limit(self, topic: str) -> int:
        """The largest record accepted from ``topic`` (see Registry.size_limit)."""
        return self.registry.size_limit(topic, self.max_bytes)

    async def close(self) -> None:
        await self._loads.close()
        await self.committer.close()

    async def _load_batch(self, keys: list[tuple[uuid.UUID, str]]) -> list[Loaded | BaseException]:
        async with self.pool.acquire() as conn:
            return list(await self.store.load_many(conn, self.group, keys))

    # -- decode, route ----------------------------------------------------------------------

    async def handle(self, rec: Record) -> None:
        """Process one record to a committed outcome (or decide it is not ours)."""
        started = time.perf_counter()
        self.metrics.in_flight.inc()
        try:
            await self._handle(rec, started)
        finally:
            self.metrics.in_flight.dec()

    def _decode(self, rec: Record) -> Event[EventModel]:
        return decode(rec.value, self.registry, accept=self.accept, max_bytes=self.size_limit(rec.topic))

    async def _handle(self, rec: Record, started: float) -> None:
        dispatched = hoptrace.now()
        try:
            event = self._decode(rec)
        except DecodeError as exc:
            self.metrics.events_in.labels(rec.topic, "undecodable").inc()
            await self.committer.dead_letter_record(rec, exc)
            return
        if dispatched:
            event_id = event.envelope.event_id
            hoptrace.mark_at(rec.fetched_ns, "fetched", event_id)
            hoptrace.mark_at(dispatched, "dispatched", event_id)
            hoptrace.mark("decoded", event_id)
        self.metrics.events_in.labels(rec.topic, event.event_type).inc()
        payload, envelope = event.payload, event.envelope
        if isinstance(payload, RetryDue):
            await self._on_retry_due(rec, envelope, payload)
        elif isinstance(payload, EventDiscarded):
            await self._on_discarded(rec, envelope, payload)
        elif isinstance(payload, SubjectErasureRequested):
            await self.data_requests.erase(envelope, payload)
            if self.sealer is not None:
                self.sealer.forget(payload.subject_hash, payload.workflow_ids)
        elif isinstance(payload, WorkflowsRetired):
            await self._on_retired(rec, envelope, payload)
        elif isinstance(payload, RepinRequested):
            # Only an operator's request (through the rollout service) counts.
            addressed = payload.service == self.spec.name
            if addressed and self.repins is not None and not await self._unproven(envelope, rec):
                await self.repins.answer(envelope, payload)
        elif self.spec.handler_for(event.event_type) is not None:
            if await self._unproven(envelope, rec) or await self._foreign_tokens(envelope, rec):
                return
            if await self._process(event, rec, attempt=envelope.attempt, failures=[], via=Via.DELIVERY):
                self.window.step(time.perf_counter() - started)
        else:
            return  # another service's event on a shared topic
        self.metrics.handle_latency.labels(event.event_type).observe(time.perf_counter() - started)

    async def _on_retry_due(self, rec: Record, envelope: Envelope, due: RetryDue) -> None:
        if due.service != self.spec.name or due.consumer_group != self.group:
            return
        if is_sealed(due.original):
            try:
                due = RetryDue.model_validate(await self._open_event(envelope))
            except KeyDestroyedError:
                # Its subject was erased: the workflow ended, and nothing is left to retry.
                log.info(
                    "a retry of an erased subject's event; dropped",
                    extra=fields(event_id=str(envelope.event_id)),
                )
                return
            except (PersistentError, ValidationError, ValueError) as exc:
                await self.committer.dead_letter_record(rec, PersistentError(f"/payload/original: {exc}"))
                return
        try:
            original = record_from_original(due.original)
        except ValueError as exc:  # base64 that does not decode: the control record is poison
            await self.committer.dead_letter_record(
                rec, UndecodableError(f"/payload/original: {exc}", pointer="/payload/original")
            )
            return
        try:
            event = self._decode(original)
        except DecodeError as exc:
            await self.committer.dead_letter_record(original, exc)
            return
        if await self._unproven(event.envelope, original):
            return
        await self._process(event, original, attempt=due.attempt, failures=list(due.failures), via=Via.RETRY)

    async def _open_event(self, envelope: Envelope) -> dict[str, Any]:
        if self.sealer is None:
            raise PersistentError("sealed personal data, and no key store is configured")
        return await self.sealer.open_event(envelope)

    async def _foreign_tokens(self, envelope: Envelope, rec: Record) -> bool:
        """True (and the record dead-lettered) when a personal field holds a value sealed for
        another event: whoever pasted it there cannot have opened it, and no reader of this
        event may open it on their behalf."""
        unbound = self.sealer.unbound(envelope) if self.sealer is not None else []
        if unbound:
            error = PersistentError(f"{', '.join(unbound)}: sealed for another event")
            await self.committer.dead_letter_record(rec, error)
        return bool(unbound)

    async def _unproven(self, envelope: Envelope, rec: Record) -> bool:
        """True (and the record dead-lettered as ``unauthorized``) when its event is of a
        signed type and not proven to come from its registered producer."""
        try:
            self.keys.verifier.check(envelope.event_type, envelope.producer.service, rec.value, rec.headers)
        except UnauthorizedError as exc:
            await self.committer.dead_letter_record(rec, exc)
            return True
        return False

    async def _on_discarded(self, rec: Record, envelope: Envelope, msg: EventDiscarded) -> None:
        if msg.service != self.spec.name or msg.consumer_group != self.group:
            return
        if await self._unproven(envelope, rec):  # only an operator's discard counts
            return
        discarded = await self._uuid_or_dead_letter(
            rec, msg.discarded_event_id, "/payload/discarded_event_id"
        )
        if discarded is None:
            return
        now = self.clock.now()
        async with self.pool.acquire() as conn, conn.transaction():
            await self.store.discard(
                conn, group=self.group, event_id=discarded, workflow_id=envelope.workflow_id, now=now
            )
        await self.drain(envelope.workflow_id)

    async def _on_retired(self, rec: Record, envelope: Envelope, msg: WorkflowsRetired) -> None:
        run_id = await self._uuid_or_dead_letter(rec, msg.run_id, "/payload/run_id")
        if run_id is not None:
            await self.data_requests.retire(envelope, msg, run_id)

    async def _uuid_or_dead_letter(self, rec: Record, value: str, pointer: str) -> uuid.UUID | None:
        """An id field of a control event as a UUID; a malformed one dead-letters the record."""
        try:
            return uuid.UUID(value)
        except ValueError:
            await self.committer.dead_letter_record(rec, UndecodableError("not a UUID", pointer=pointer))
            return None

    # -- dedupe, order, load, handle, classify, commit ----------------------------------------

    async def _process(
        self,
        event: Event[EventModel],
        rec: Record,
        *,
        attempt: int,
        failures: list[Failure],
        via: Via,
        parked_id: int | None = None,
    ) -> bool:
        """Dedupe, order, load, handle, commit: True when a step of this release committed."""
        env = event.envelope
        route = self.spec.handler_for(env.event_type)
        assert route is not None
        with (
            personal_scope(),
            log_context(
                workflow_id=env.workflow_id,
                event_id=str(env.event_id),
                trace_id=env.traceparent[3:35],
                event_type=env.event_type,
            ),
        ):
            for _ in range(MAX_CONFLICT_RETRIES):
                loaded = await self._loads.submit((env.event_id, env.workflow_id))
                hoptrace.mark("loaded", env.event_id)
                if not self._admit(loaded, attempt, via):
                    self.metrics.duplicates.inc()
                    if parked_id is not None:  # handled elsewhere already; drop the parked copy
                        async with self.pool.acquire() as conn, conn.transaction():
                            await self.store.unpark(conn, parked_id)
                    return False
                state = loaded.state
                if self.pinning is not None:
                    decision = self.pinning.decide(env, state)
                    if decision.verdict is Verdict.CLAIM:
                        assert decision.owner is not None
                        await self._claim(env, decision.owner)
                        continue  # reload: the checkpoint row now names the owner
                    if decision.verdict is Verdict.NOT_MINE:
                        if not await self._not_mine(env, attempt, decision.owner, state):
                            continue  # moved to another release meanwhile: decide again
                        return False
                    if loaded.handled_before:
                        # Moved here from another release, which took this event before the move.
                        if not await self._not_mine(env, attempt, decision.owner, state):
                            continue
                        return False
                waiting_on = state.parked_on if state is not None else None
                ended = state.ended if state is not None else None
                # The workflow's end overtakes whatever waits: nothing behind it will run.
                closing = env.event_type == WorkflowEnded.event_type
                if (
                    via is not Via.DRAIN
                    and waiting_on is not None
                    and waiting_on != env.event_id
                    and ended is None
                    and not closing
                ):
                    await self._park(event, rec, attempt)
                    return False
                if via is Via.DELIVERY and loaded.has_parked and waiting_on is None:
                    # A crash interrupted an earlier drain; finish it before overtaking.
                    await self.drain(env.workflow_id)
                    continue
                refused: PersistentError | None = None
                version = self.spec.state_version
                try:
                    migrated = self.call.migrated(state)
                except PersistentError as exc:
                    # State this code cannot read (newer, or no migration path): the event is
                    # dead-lettered and the checkpoint kept exactly as stored, version and all.
                    assert state is not None
                    migrated, version, refused = state.state, state.state_version, exc
                frame = Frame(
                    revision=state.revision if state else None,
                    state_version=version,
                    parked_on=waiting_on,
                    state=migrated,
                    ended=ended,
                )
                try:
                    result: Result
                    if ended is not None and (not closing or _another_end(event, ended)):
                        result, traceparent = Dropped(f"workflow ended ({ended})"), env.traceparent
                    elif refused is not None:
                        self.metrics.failures.labels(refused.category, env.event_type).inc()
                        result, traceparent = DeadLetter(refused, refused.category), env.traceparent
                    else:
                        result, traceparent = await self.call.run(route, event, frame, attempt, failures)
                    hoptrace.mark("handled", env.event_id)
                    handled = Handled(event, rec, route, frame, attempt, failures, traceparent, parked_id)
                    resolved = await self.committer.commit(handled, result)
                    hoptrace.mark("committed", env.event_id)
                except ConflictError:
                    log.info("checkpoint moved under us; reloading", extra=fields(via=via.value))
                    continue
                if resolved and via is not Via.DRAIN:
                    await self.drain(env.workflow_id)
                return True
            raise RuntimeError(
                f"workflow {env.workflow_id}: {MAX_CONFLICT_RETRIES} conflicting updates in a row"
            )

    @staticmethod
    def _admit(loaded: Loaded, attempt: int, via: Via) -> bool:
        """Dedupe: whether the inbox lets this attempt through."""
        inbox = loaded.inbox
        if via is Via.DRAIN:
            return inbox is not None and inbox.outcome == InboxOutcome.PARKED
        if inbox is None:
            return True
        return (
            inbox.outcome in (InboxOutcome.RETRYING, InboxOutcome.DEAD_LETTERED) and attempt > inbox.attempt
        )

    async def _claim(self, env: Envelope, owner: str) -> None:
        async with self.pool.acquire() as conn:
            pinned = await self.store.claim_release(
                conn,
                workflow_id=env.workflow_id,
                workflow_type=env.workflow_type,
                release=owner,
                state_version=self.spec.state_version,
                now=self.clock.now(),
            )
        log.info("a workflow without a pin; claimed for the stable release", extra=fields(release=pinned))

    async def _not_mine(
        self, env: Envelope, attempt: int, owner: str | None, decided_on: StateRow | None
    ) -> bool:
        """Another release of this service owns the workflow: recorded, not handled. False
        (nothing recorded) when the workflow was moved to another release since the
        decision, or the event was recorded meanwhile: decide again (chorus.releases.repin)."""

        async def passed(conn: asyncpg.Connection, pinned_to: str | None) -> bool:
            return await self.store.pass_event(
                conn,
                group=self.group,
                event_id=env.event_id,
                attempt=attempt,
                event_type=env.event_type,
                workflow_id=env.workflow_id,
                pinned_to=pinned_to,
                now=self.clock.now(),
            )

        async with self.pool.acquire() as conn:
            if decided_on is not None and decided_on.release is not None:
                recorded = await passed(conn, decided_on.release)
            else:
                # No pin in the row yet: a move would create one; wait for it under its lock.
                async with conn.transaction():
                    await self.store.lock_pin(conn, env.workflow_id)
                    now_on = await self.store.pin_of(conn, env.workflow_id)
                    moved = now_on is not None and now_on.release not in (None, owner)
                    recorded = not moved and await passed(conn, None)
        if not recorded:
            return False
        self.metrics.not_mine.labels(env.event_type).inc()
        self.window.skipped()
        log.debug("pinned to another release", extra=fields(owner=owner or "unnamed"))
        return True

    async def _park(self, event: Event[EventModel], rec: Record, attempt: int) -> None:
        env = event.envelope
        now = self.clock.now()
        async with self.pool.acquire() as conn, conn.transaction():
            claimed = await self.store.claim_inbox(
                conn,
                group=self.group,
                event_id=env.event_id,
                attempt=attempt,
                outcome=InboxOutcome.PARKED,
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

    async def drain(self, workflow_id: str) -> None:
        """Process, in arrival order, records that waited while the workflow was parked.
        Called by the release the workflow is pinned to only: after its own step, on its own
        discard, or from its housekeeping (``store.workflows_to_drain`` by release)."""
        while True:
            async with self.pool.acquire() as conn:
                row = await self.store.next_parked(conn, workflow_id)
                parked_on = await self.store.parked_on(conn, workflow_id)
            if row is None or parked_on is not None:
                return
            rec = Record(
                row.topic, row.partition, row.offset, row.key, row.value, tuple(row.headers), row.timestamp_ms
            )
            try:
                event = self._decode(rec)
            except DecodeError:  # it decoded when parked; the registry changed under it
                async with self.pool.acquire() as conn, conn.transaction():
                    await self.store.unpark(conn, row.id)
                continue
            await self._process(event, rec, attempt=row.attempt, failures=[], via=Via.DRAIN, parked_id=row.id)


def _another_end(event: Event[EventModel], ended: str) -> bool:
    """A second, different end of a workflow this service saw end (a cancel that crossed a
    completion): the first one stands, and its compensation must not run again. The same
    end again (the service's own, coming back) is handled as usual."""
    payload = event.payload
    return isinstance(payload, WorkflowEnded) and payload.outcome != ended
