"""Reset from a step plugged into a service: the answer to ``workflow.reset_requested``.

The gateway states the request on chorus.resets, on the workflow's key, once it checked
that the workflow may go back to that event (workflows.yaml's ``reset``). Every service's
runtime reads it and, in one transaction with the request's inbox row:

- rolls the workflow's checkpoint back through its history (chorus.resets.store) to what it
  was before the first of its steps that handled the point's event or one after it;
- records the events after the point as dropped (one still on its way is skipped) and
  forgets the point's;
- calls the service's ``on_reset`` (ServiceSpec), whose events and effects commit with the
  rollback: what the undone steps took is given back (the budget agent's reservation);
- says what it did (``workflow.reset_applied``), when it held anything of the workflow.

A service whose step handled the point's event then reads that record again from its topic
(the original bytes, signed by its producer: nothing vouches for it but its signature) and
handles it as the next step; what that step emits are new events (their ids derive from the
reset's, ``StateRow.rerun``), so no consumer takes them for the first run's. A service that
cannot roll back now (a retry, a dead letter, a parked event of the workflow waits there)
changes nothing and says why.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import asyncpg

from chorus.base.errors import ChorusError, TransientError
from chorus.base.logs import fields
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import ResetApplied, ResetRequested
from chorus.kernel.answering import Answering
from chorus.kernel.chain import Done, Finish, Item, Via
from chorus.kernel.outbox import OutboxTransaction
from chorus.kernel.recordpath import Plugs
from chorus.kernel.records import Record, record_from_original
from chorus.kernel.runner import Parts
from chorus.kernel.service import Reset, ServiceSpec
from chorus.kernel.steps.route import ControlHandler
from chorus.kernel.store import InboxOutcome, Position
from chorus.resets.kafka import Gone, KafkaReader
from chorus.resets.store import Busy, Checkpointed, HistoryGap, ResetStore, Rewound

log = logging.getLogger("chorus.resets")


class Refused(Exception):
    """This service cannot take the reset now: it changes nothing, and says why."""


@dataclass
class ResetControl:
    via: Answering
    store: ResetStore
    spec: ServiceSpec[Any, Any]
    deps: Any
    reader: KafkaReader
    release: str | None
    """This process's release (chorus.releases): only the one the workflow is pinned to
    rolls it back (the releases of a service share its tables)."""

    def addressed(self, item: Item) -> bool:
        """Every service's: each rolls back what it holds (the signature, the gateway's, is
        checked before it is acted on)."""
        return True

    async def __call__(self, item: Item) -> Done:
        env = item.decoded.envelope
        request = item.decoded.payload
        assert isinstance(request, ResetRequested)
        try:
            point = await self._apply(env, request)
        except Refused as exc:
            await self._refuse(env, request, str(exc))
            return Done(Finish.CONTROL)
        if point is None:
            return Done(Finish.CONTROL)
        return Done(Finish.CONTROL, then=(Item(point, via=Via.RESET),))

    async def _apply(self, env: Envelope, request: ResetRequested) -> Record | None:
        """Roll back and answer, in one transaction; the record this service then handles
        again, read before anything changed (one gone from its topic refuses the reset here).
        The request read again (the process stopped before the event was handled again, so
        its offset was not committed) finishes what is left."""
        via, workflow_id = self.via, env.workflow_id
        async with via.pool.acquire() as conn:
            if await self.store.claimed(conn, via.group, env.event_id):
                pending = await self.store.pending(
                    conn, group=via.group, workflow_id=workflow_id, reset_id=request.reset_id,
                    point=request.point_event_id, rerun_point=_rerun_point(request),
                )  # fmt: skip
                return await self._point(request, pending.point) if pending is not None else None
            pinned = await self.store.release_of(conn, workflow_id)
            position = await self.store.position(conn, workflow_id, request.point_event_id, undone_by=None)
        if pinned is not None and pinned != self.release:
            async with via.transaction() as (conn, _):
                await via.claim(conn, env, InboxOutcome.NOT_MINE)  # its release's to roll back
            return None
        record = await self._point(request, position)
        async with via.transaction() as (conn, tx):
            if not await via.claim(conn, env):
                return None  # another replica of this release took it meanwhile
            try:
                rewound = await self.store.rewind(
                    conn,
                    group=via.group,
                    workflow_id=workflow_id,
                    point=request.point_event_id,
                    undone=request.undone,
                    reset_id=request.reset_id,
                    rerun_point=_rerun_point(request),
                    cause=env.event_id,
                    cause_type=env.event_type,
                    now=via.clock.now(),
                )
            except HistoryGap as exc:
                raise Refused(str(exc)) from None
            if isinstance(rewound, Busy):
                raise Refused(rewound.reason)
            if request.replacement is None and rewound.point != position:
                raise Refused("a step of the workflow moved it here meanwhile: ask again")
            compensated = await self._compensate(conn, tx, env, rewound)
            if _held_anything(rewound, compensated) or record is not None:
                answer = self._answer(
                    request, rewound=rewound, compensated=compensated, rehandled=record is not None
                )
                await tx.publish(via.answer(env, answer, position="reset"))
        log.warning(
            "workflow reset",
            extra=fields(
                workflow_id=workflow_id,
                reset_id=request.reset_id,
                by=request.requested_by,
                steps_undone=rewound.steps,
                rehandled=record is not None,
            ),
        )
        return record

    async def _compensate(
        self, conn: asyncpg.Connection, tx: OutboxTransaction, env: Envelope, rewound: Rewound
    ) -> list[str]:
        """The service's ``on_reset``: its events and effects, in the rollback's transaction.
        One that fails refuses the reset here (nothing changed), never stops the topic."""
        if self.spec.on_reset is None:
            return []
        try:
            reset = Reset(
                env,
                self._migrated(rewound.before),
                self._migrated(rewound.after),
                rewound.steps,
                self.via.clock.now(),
            )
            outcome = await self.spec.on_reset(reset, self.deps)
            if outcome.state is not None or outcome.timers or outcome.ended is not None:
                raise ValueError("on_reset gives back with events and effects only (no state, timers or end)")
            compensated = []
            for index, event in enumerate(outcome.emit):
                if not isinstance(event, EventModel):
                    raise ValueError("on_reset emits events without overrides")
                await tx.publish(self.via.answer(env, event, position=f"reset/emit/{index}"))
                compensated.append(event.event_type)
            for effect in outcome.effects:
                await effect.apply(conn)
        except TransientError:
            raise  # the request is read again (nothing was committed)
        except (ChorusError, ValueError, TypeError, KeyError, asyncpg.DataError) as exc:
            raise Refused(f"its compensation (on_reset) failed: {exc}") from exc
        return compensated

    def _migrated(self, checkpoint: Checkpointed | None) -> dict[str, Any] | None:
        """The state brought up to the version this code writes, as the record path reads it
        (one it cannot read refuses the reset here: a PersistentError, caught by the caller)."""
        if checkpoint is None or checkpoint.state is None:
            return None
        return self.spec.upgraded(checkpoint.state, checkpoint.version)

    async def _point(self, request: ResetRequested, at: Position | None) -> Record | None:
        """What this service handles again: the operator's corrected event, when it takes
        that type (a new event: every service that takes its type handles it); else the
        point's own record, read again from where its step read it."""
        if request.replacement is not None:
            if self.spec.handler_for(request.point_event_type) is None:
                return None
            try:
                return record_from_original(request.replacement)
            except ValueError as exc:
                raise Refused(f"the corrected event does not decode: {exc}") from exc
        if at is None:
            return None
        try:
            return await self.reader.read(at)
        except Gone as exc:
            raise Refused(str(exc)) from None

    async def _refuse(self, env: Envelope, request: ResetRequested, reason: str) -> None:
        async with self.via.transaction() as (conn, tx):
            if await self.via.claim(conn, env):
                await tx.publish(
                    self.via.answer(env, self._answer(request, refused=reason), position="reset")
                )
        log.error("reset refused", extra=fields(workflow_id=env.workflow_id, why=reason))

    def _answer(
        self,
        request: ResetRequested,
        *,
        rewound: Rewound | None = None,
        compensated: list[str] | None = None,
        refused: str | None = None,
        rehandled: bool = False,
    ) -> ResetApplied:
        return ResetApplied(
            service=self.via.producer.service,
            reset_id=request.reset_id,
            steps_undone=rewound.steps if rewound else 0,
            rehandled=rehandled,
            compensated=compensated or [],
            refused=refused,
        )


def _rerun_point(request: ResetRequested) -> uuid.UUID:
    """The event a reset has handled again: the point, or the operator's correction of it."""
    return request.replacement_event_id or request.point_event_id


def _held_anything(rewound: Rewound, compensated: list[str]) -> bool:
    """Whether the service had anything of the workflow past the point (its answer is
    worth a line in the timeline)."""
    return bool(rewound.steps or rewound.point or compensated)


@dataclass
class Resets:
    """Every service answers an operator's reset of one of its workflows."""

    CONTROLS: ClassVar[Mapping[type[EventModel], type[ControlHandler]]] = {ResetRequested: ResetControl}

    async def plug(self, parts: Parts) -> Plugs:
        control = ResetControl(
            via=parts.answering(),
            store=ResetStore(parts.spec.name),
            spec=parts.spec,
            deps=parts.deps,
            reader=KafkaReader(parts.settings.kafka_bootstrap, parts.client_id),
            release=parts.identity.release,
        )
        return Plugs(controls={ResetRequested: control})
