"""Reset from a step plugged into a service: the answer to ``workflow.reset_requested``.

The gateway states the request on chorus.control, on the workflow's key, once it checked
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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from chorus.base.logs import fields
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import ResetApplied, ResetRequested
from chorus.kernel.answering import Answering
from chorus.kernel.chain import Done, Finish, Item, Via
from chorus.kernel.recordpath import Plugs
from chorus.kernel.records import Record
from chorus.kernel.runner import Parts
from chorus.kernel.service import Reset, ServiceSpec
from chorus.kernel.steps.route import ControlHandler
from chorus.kernel.store import Position
from chorus.resets.kafka import KafkaReader
from chorus.resets.store import Busy, ResetStore, Rewound

log = logging.getLogger("chorus.resets")


class Unreadable(Exception):
    """The point's record is gone from its topic: nothing is rolled back."""


@dataclass
class ResetControl:
    via: Answering
    store: ResetStore
    spec: ServiceSpec[Any, Any]
    deps: Any
    reader: KafkaReader

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
        except Unreadable as exc:
            await self._refuse(env, request, str(exc))
            return Done(Finish.CONTROL)
        if point is None:
            return Done(Finish.CONTROL)
        return Done(Finish.CONTROL, then=(Item(point, via=Via.RESET),))

    async def _apply(self, env: Any, request: ResetRequested) -> Record | None:
        """Roll back and answer, in one transaction; the point's record when this service
        handles it again."""
        via = self.via
        async with via.transaction() as (conn, tx):
            if not await via.claim(conn, env):
                return None  # applied already (a redelivery of the request)
            rewound = await self.store.rewind(
                conn,
                group=via.group,
                workflow_id=env.workflow_id,
                point=request.point_event_id,
                undone=request.undone,
                reset_id=request.reset_id,
                cause=env.event_id,
                cause_type=env.event_type,
                now=via.clock.now(),
            )
            if isinstance(rewound, Busy):
                await tx.publish(
                    via.answer(env, self._answer(request, refused=rewound.reason), position="reset")
                )
                return None
            record = await self._point(rewound.point)
            compensated: list[str] = []
            if self.spec.on_reset is not None:
                outcome = await self.spec.on_reset(
                    Reset(env, rewound.state_before, rewound.state_after, rewound.steps, via.clock.now()),
                    self.deps,
                )
                for index, event in enumerate(outcome.emit):
                    assert isinstance(event, EventModel), "on_reset emits events (no overrides)"
                    await tx.publish(via.answer(env, event, position=f"reset/emit/{index}"))
                    compensated.append(event.event_type)
                for effect in outcome.effects:
                    await effect.apply(conn)
            if _held_anything(rewound, compensated):
                answer = self._answer(request, rewound=rewound, compensated=compensated)
                await tx.publish(via.answer(env, answer, position="reset"))
        log.warning(
            "workflow reset",
            extra=fields(
                workflow_id=env.workflow_id,
                reset_id=request.reset_id,
                by=request.requested_by,
                steps_undone=rewound.steps,
                rehandled=record is not None,
            ),
        )
        return record

    async def _point(self, at: Position | None) -> Record | None:
        if at is None:
            return None
        record = await self.reader.read(at)
        if record is None:
            raise Unreadable(
                f"the point's event is no longer on {at.topic} (partition {at.partition}, offset "
                f"{at.offset}): its retention passed, so it cannot be handled again"
            )
        return record

    async def _refuse(self, env: Any, request: ResetRequested, reason: str) -> None:
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
    ) -> ResetApplied:
        return ResetApplied(
            service=self.via.producer.service,
            reset_id=request.reset_id,
            steps_undone=rewound.steps if rewound else 0,
            rehandled=rewound is not None and rewound.point is not None,
            compensated=compensated or [],
            refused=refused,
        )


@dataclass
class Resets:
    """Every service answers an operator's reset of one of its workflows."""

    CONTROLS: ClassVar[Mapping[type[EventModel], type[ControlHandler]]] = {ResetRequested: ResetControl}

    async def plug(self, parts: Parts) -> Plugs:
        reader = KafkaReader(parts.settings.kafka_bootstrap, parts.client_id)
        control = ResetControl(
            via=parts.answering(),
            store=ResetStore(parts.spec.name),
            spec=parts.spec,
            deps=parts.deps,
            reader=reader,
        )
        return Plugs(controls={ResetRequested: control})


def _held_anything(rewound: Rewound, compensated: list[str]) -> bool:
    """Whether the service had anything of the workflow past the point (its answer is
    worth a line in the timeline)."""
    return bool(rewound.steps or rewound.point or compensated)
