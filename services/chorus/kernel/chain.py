"""The record path as a chain of steps, in the style of getsentry/arroyo's strategies.

A record enters at the head as an :class:`Item`. Each step either passes the item on
(returns it) or finishes it (returns :class:`Done`: skipped, parked, dead-lettered,
committed, or a control message acted on). The chain never loops by hand inside a step:

- a step that finds the ground moved under it — a checkpoint another replica changed, a
  workflow claimed or moved to another release meanwhile — returns :class:`Again`, and
  the chain runs the item once more from the step it names (at most ``MAX_AGAIN`` times);
- work that follows a finished item — the records that waited while its workflow was
  parked, the original record a durable retry carries — is named in ``Done.then`` and
  submitted at the head of the chain, one after another, never by recursion.

Offsets are not the chain's business: the Kafka edge commits a record's offset only after
:meth:`Chain.run` returned for it. An exception out of ``run`` means infrastructure failed
(PostgreSQL down): nothing of that item was committed, and the caller tries it again.

Which steps run, and in which order, is written once: ``chorus.kernel.recordpath``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from chorus.base import hoptrace
from chorus.base.logs import log_context, personal_scope
from chorus.contracts.base import EventModel
from chorus.contracts.platform import Failure
from chorus.kernel.codec import Event
from chorus.kernel.records import Record
from chorus.kernel.results import Frame, Result
from chorus.kernel.service import On
from chorus.kernel.store import Loaded

MAX_AGAIN = 8
"""How often one item may be sent back (conflicting updates in a row) before the chain
gives up on it for now: an infrastructure failure, so the record is tried again later."""


class Via(Enum):
    """How an item reached the chain: what the inbox lets through, and whether it may
    overtake records parked for its workflow."""

    DELIVERY = "delivery"
    """Read from its topic."""
    RETRY = "retry"
    """Fired by a durable retry (retry.due): a later attempt of the same event."""
    DRAIN = "drain"
    """Taken from the workflow's parked records, in arrival order, once it stopped waiting."""
    RESET = "reset"
    """Read again from its topic for an operator's reset (chorus.resets), whose point it is:
    its inbox row was forgotten (``StateRow.rerun`` says which reset)."""


@dataclass
class Item:
    """One record on its way through the chain, and what the steps learned of it."""

    record: Record
    via: Via = Via.DELIVERY
    attempt: int | None = None
    """The attempt (a retry's or a parked record's); None: the envelope's own."""
    failures: list[Failure] = field(default_factory=list)
    parked_id: int | None = None
    """The row this item was drained from (Via.DRAIN)."""
    started: float = field(default_factory=time.perf_counter)
    dispatched_ns: int = field(default_factory=hoptrace.now)
    """When a lane took it (the hop trace; 0 when not tracing)."""
    event: Event[EventModel] | None = None
    """decode: the typed event."""
    route: On | None = None
    """route: this service's handler of the event (None: a control message)."""
    loaded: Loaded | None = None
    """load: the inbox row and checkpoint this handling builds on."""
    frame: Frame | None = None
    """handle: where the handling stands (its checkpoint revision)."""
    result: Result | None = None
    """handle: how the handler ended."""
    traceparent: str = ""
    """handle: the trace context of what the step emits."""
    published: tuple[uuid.UUID | None, ...] = ()
    """commit: the ids of the events the step published."""
    at: str | None = None
    """The step the item (re-)enters at; None: the head."""

    @property
    def decoded(self) -> Event[EventModel]:
        assert self.event is not None, "a step after decode"
        return self.event

    @property
    def tries(self) -> int:
        """The attempt this handling is."""
        return self.attempt if self.attempt is not None else self.decoded.envelope.attempt


class Finish(Enum):
    NOT_OURS = "not_ours"
    """Another service's event on a shared topic, or a control message for another."""
    SKIPPED = "skipped"
    """Finished here before (a duplicate), or another release's workflow."""
    PARKED = "parked"
    DEAD_LETTERED = "dead_lettered"
    """The record itself: it is not a valid event, or not proven to be what it says."""
    CONTROL = "control"
    """A message to the runtime, acted on."""
    COMMITTED = "committed"
    """A handling's outcome (its result, a retry, a dead letter, a review, a drop)."""
    DEFERRED = "deferred"
    """Runs again after what ``then`` names first (records that waited before it)."""


@dataclass(frozen=True)
class Drain:
    """Submit the records parked for ``workflow_id`` at the head, in arrival order, while
    the workflow waits on nothing."""

    workflow_id: str


Work = Item | Drain


@dataclass(frozen=True)
class Done:
    """An item is finished; ``then`` is submitted at the head of the chain, in order."""

    finish: Finish
    then: tuple[Work, ...] = ()


@dataclass(frozen=True)
class Again:
    """Run the item once more from the step named ``at``."""

    at: str


class Step(Protocol):
    name: str

    async def __call__(self, item: Item) -> Item | Done | Again: ...


class ParkedRecords(Protocol):
    async def next_item(self, workflow_id: str) -> Item | None:
        """The oldest record parked for the workflow as an item, unless it waits."""
        ...


class Observer(Protocol):
    """Watches items pass (metrics, the hop trace, a release's step report)."""

    def passed(self, step: str, item: Item) -> None: ...

    def done(self, item: Item, done: Done) -> None: ...


class Chain:
    def __init__(self, *steps: Step, parked: ParkedRecords, observers: Sequence[Observer] = ()) -> None:
        self.steps = steps
        self.parked = parked
        self.observers = observers
        self._index = {step.name: i for i, step in enumerate(steps)}
        assert len(self._index) == len(steps), "step names are unique"

    @property
    def names(self) -> list[str]:
        return [step.name for step in self.steps]

    async def run(self, record: Record) -> None:
        """Take one record, and whatever it brings along, to a finished state."""
        await self.submit(Item(record))

    async def drain(self, workflow_id: str) -> None:
        """Run what waited for ``workflow_id`` (after a crash interrupted its drain)."""
        await self.submit(Drain(workflow_id))

    async def submit(self, first: Work) -> None:
        todo: list[Work] = [first]  # a stack: what a finished item brings runs next
        while todo:
            work = todo.pop()
            if isinstance(work, Drain):
                item = await self.parked.next_item(work.workflow_id)
                if item is not None:
                    todo += [work, item]  # this one, then ask for the next
                continue
            done = await self._through(work)
            todo.extend(reversed(done.then))

    async def _through(self, item: Item) -> Done:
        with personal_scope(), contextlib.ExitStack() as scope:
            again, logged = 0, False
            index = self._index[item.at] if item.at is not None else 0
            while True:
                if not logged and item.event is not None:
                    scope.enter_context(_event_logs(item.event))
                    logged = True
                step = self.steps[index]
                out = await step(item)
                if isinstance(out, Done):
                    for observer in self.observers:
                        observer.done(item, out)
                    return out
                if isinstance(out, Again):
                    again += 1
                    if again > MAX_AGAIN:
                        raise RuntimeError(
                            f"{item.decoded.workflow_id}: {MAX_AGAIN} conflicting updates in a row"
                        )
                    index = self._index[out.at]
                    continue
                for observer in self.observers:
                    observer.passed(step.name, out)
                item, index = out, index + 1


def _event_logs(event: Event[Any]) -> contextlib.AbstractContextManager[None]:
    """Every log line about the item names its workflow, event and trace."""
    env = event.envelope
    return log_context(
        workflow_id=env.workflow_id,
        event_id=str(env.event_id),
        trace_id=env.traceparent[3:35],
        event_type=env.event_type,
    )


def poison_id(group: str, record: Record) -> uuid.UUID:
    """The inbox key of a record dead-lettered by its position (it has no event id to trust)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"chorus:{group}:{record.topic}:{record.partition}:{record.offset}")
