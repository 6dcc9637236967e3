"""route and control: whose record is it, and the messages addressed to the runtime itself.

route: this service's handler of the event, a control message (on chorus.control and
chorus.data: a durable retry, an operator's discard, and what the feature packages add),
or not ours (another service's event on a shared topic, a control message for another).
control: acts on a control message addressed to this service, after its signature was
checked; an event for a handler passes on.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from chorus.base.clock import Clock
from chorus.base.errors import KeyDestroyedError, PersistentError, UndecodableError
from chorus.base.logs import fields
from chorus.contracts.base import is_sealed
from chorus.contracts.platform import EventDiscarded, RetryDue
from chorus.kernel.chain import Done, Drain, Finish, Item, Via
from chorus.kernel.ports import Sealing
from chorus.kernel.records import record_from_original
from chorus.kernel.service import ServiceSpec
from chorus.kernel.steps.letters import Letters
from chorus.kernel.store import Store

log = logging.getLogger("chorus.pipeline")


class ControlHandler(Protocol):
    """A message to the runtime of one or every service (a feature package adds its own)."""

    def addressed(self, item: Item) -> bool:
        """Whether it is for this service's runtime (its consumer group)."""
        ...

    async def __call__(self, item: Item) -> Done: ...


@dataclass
class Route:
    spec: ServiceSpec[Any, Any]
    controls: Mapping[str, ControlHandler]
    name: str = "route"

    async def __call__(self, item: Item) -> Item | Done:
        event_type = item.decoded.event_type
        control = self.controls.get(event_type) if item.via is Via.DELIVERY else None
        if control is not None:
            return item if control.addressed(item) else Done(Finish.NOT_OURS)
        item.route = self.spec.handler_for(event_type)
        return item if item.route is not None else Done(Finish.NOT_OURS)


@dataclass
class Control:
    controls: Mapping[str, ControlHandler]
    name: str = "control"

    async def __call__(self, item: Item) -> Item | Done:
        if item.route is not None:
            return item
        return await self.controls[item.decoded.event_type](item)


@dataclass
class RetryDueControl:
    """A durable retry fired (the timer service publishes it): the original record it carries
    is submitted at the head of the chain as the next attempt."""

    service: str
    group: str
    letters: Letters
    sealer: Sealing | None

    def addressed(self, item: Item) -> bool:
        due = item.decoded.payload
        assert isinstance(due, RetryDue)
        return due.service == self.service and due.consumer_group == self.group

    async def __call__(self, item: Item) -> Done:
        due = item.decoded.payload
        assert isinstance(due, RetryDue)
        if is_sealed(due.original):
            try:
                due = await self._opened(item)
            except KeyDestroyedError:
                # Its subject was erased: the workflow ended, and nothing is left to retry.
                log.info("a retry of an erased subject's event; dropped")
                return Done(Finish.CONTROL)
            except (PersistentError, ValidationError, ValueError) as exc:
                await self.letters.record(item.record, PersistentError(f"/payload/original: {exc}"))
                return Done(Finish.DEAD_LETTERED)
        try:
            original = record_from_original(due.original)
        except ValueError as exc:  # base64 that does not decode: the control record is poison
            error = UndecodableError(f"/payload/original: {exc}", pointer="/payload/original")
            await self.letters.record(item.record, error)
            return Done(Finish.DEAD_LETTERED)
        retry = Item(original, via=Via.RETRY, attempt=due.attempt, failures=list(due.failures))
        return Done(Finish.CONTROL, then=(retry,))

    async def _opened(self, item: Item) -> RetryDue:
        if self.sealer is None:
            raise PersistentError("sealed personal data, and no key store is configured")
        return RetryDue.model_validate(await self.sealer.open_event(item.decoded.envelope))


@dataclass
class DiscardControl:
    """An operator gave up on a dead-lettered event (through the dead-letter service): it is
    discarded, and what waited behind it in its workflow is drained."""

    service: str
    group: str
    store: Store
    letters: Letters
    clock: Clock

    def addressed(self, item: Item) -> bool:
        msg = item.decoded.payload
        assert isinstance(msg, EventDiscarded)
        return msg.service == self.service and msg.consumer_group == self.group

    async def __call__(self, item: Item) -> Done:
        msg, env = item.decoded.payload, item.decoded.envelope
        assert isinstance(msg, EventDiscarded)
        discarded = await uuid_or_dead_letter(
            self.letters, item, msg.discarded_event_id, "/payload/discarded_event_id"
        )
        if discarded is None:
            return Done(Finish.DEAD_LETTERED)
        await self.store.discard(
            group=self.group, event_id=discarded, workflow_id=env.workflow_id, now=self.clock.now()
        )
        log.info("discarded on an operator's request", extra=fields(discarded=str(discarded)))
        return Done(Finish.CONTROL, then=(Drain(env.workflow_id),))


async def uuid_or_dead_letter(letters: Letters, item: Item, value: str, pointer: str) -> uuid.UUID | None:
    """An id field of a control message as a UUID; a malformed one dead-letters the record."""
    try:
        return uuid.UUID(value)
    except ValueError:
        await letters.record(item.record, UndecodableError("not a UUID", pointer=pointer))
        return None
