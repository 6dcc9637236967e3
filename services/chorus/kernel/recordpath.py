"""The record path of a service: the one place where the order of its steps is written.

    decode   bytes -> a typed event, or the record's dead letter (input never stalls)
    route    this service's handler, a control message for its runtime, or not ours
    verify   (privacy) signed types proven to come from their registered producer; no
             personal value sealed for another event
    control  act on a control message: a durable retry's original, a discard, an erasure
    load     inbox row and checkpoint (batched); an event finished before is skipped
    pin      (releases) only the release the workflow is pinned to handles it
    order    a workflow waiting on an earlier event parks this one
    handle   the handler, with semantic re-tries; how it ended
    commit   ONE transaction: inbox + checkpoint + outbox [+ effects]

Verification comes after routing: a forged record on a shared topic is refused (and
dead-lettered) by the service it is addressed to, not once by every reader of the topic.
Feature packages fill the two slots (``Plugs.verify``, ``Plugs.pin``) and add control
messages and observers; they never add a branch here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chorus.base import hoptrace
from chorus.base.clock import Clock
from chorus.base.metrics import Metrics
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.platform import EventDiscarded, RetryDue
from chorus.contracts.registry import Registry
from chorus.kernel.chain import Chain, Done, Finish, Item, Observer, Step, Via
from chorus.kernel.guard import DeadLetterGuard
from chorus.kernel.messages import Messages
from chorus.kernel.ports import Sealing, Signer
from chorus.kernel.records import Record
from chorus.kernel.service import ServiceSpec
from chorus.kernel.steps.commit import Commit
from chorus.kernel.steps.decode import Decode
from chorus.kernel.steps.handle import Handle
from chorus.kernel.steps.letters import Letters
from chorus.kernel.steps.load import Load
from chorus.kernel.steps.order import Order
from chorus.kernel.steps.route import Control, ControlHandler, DiscardControl, RetryDueControl, Route
from chorus.kernel.store import OutboxRow, Store


@dataclass(frozen=True)
class Plugs:
    """What a feature package adds to a service: steps in the record path's two slots,
    control messages its runtime answers, observers of the chain, background loops and
    fields of /health."""

    verify: Sequence[Step] = ()
    pin: Sequence[Step] = ()
    controls: Mapping[type[EventModel], ControlHandler] = field(default_factory=dict)
    """Control messages (the model its code reads -> handler) besides the kernel's."""
    observers: Sequence[Observer] = ()
    workers: Mapping[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    health: Sequence[Callable[[], Mapping[str, Any]]] = ()

    def __add__(self, other: Plugs) -> Plugs:
        return Plugs(
            verify=[*self.verify, *other.verify],
            pin=[*self.pin, *other.pin],
            controls={**self.controls, **other.controls},
            observers=[*self.observers, *other.observers],
            workers={**self.workers, **other.workers},
            health=[*self.health, *other.health],
        )


@dataclass(frozen=True)
class Identity:
    """Who a process is to Kafka and to the tables: its consumer group, the producer named
    in what it publishes, and the release its workflows' first checkpoints are pinned to."""

    group: str
    producer: ProducerRef
    release: str | None = None


KERNEL_CONTROLS: Mapping[type[EventModel], type[ControlHandler]] = {
    RetryDue: RetryDueControl,
    EventDiscarded: DiscardControl,
}
"""The control messages the kernel itself answers (a durable retry, an operator's discard)."""


@dataclass(frozen=True)
class Wiring:
    """What the kernel's steps are made of."""

    spec: ServiceSpec[Any, Any]
    registry: Registry
    store: Store
    clock: Clock
    metrics: Metrics
    identity: Identity
    deps: Any
    guard: DeadLetterGuard
    sealer: Sealing | None
    max_event_bytes: int


def letters_for(w: Wiring, signer: Signer | None, on_outbox: Callable[[], None]) -> Letters:
    """How the steps dead-letter a record by its position (and build every message)."""
    messages = Messages(w.spec, w.registry, w.identity.producer, w.identity.group, signer, w.sealer)
    return Letters(w.store, messages, w.identity.group, w.clock, w.metrics, on_outbox)


def kernel_steps(
    w: Wiring,
    letters: Letters,
    plugged: Mapping[type[EventModel], ControlHandler],
    *,
    on_committed: Callable[[list[OutboxRow]], None],
) -> KernelSteps:
    spec, store, group, clock = w.spec, w.store, w.identity.group, w.clock
    models: dict[type[EventModel], ControlHandler] = {
        RetryDue: RetryDueControl(spec.name, group, letters, w.sealer),
        EventDiscarded: DiscardControl(spec.name, group, store, letters, clock),
        **plugged,
    }
    controls = {model.event_type: handler for model, handler in models.items()}
    accept = {**spec.consumes(), **{model.event_type: model.version for model in models}}
    release = w.identity.release
    return KernelSteps(
        decode=Decode(w.registry, accept, w.max_event_bytes, w.metrics, letters),
        route=Route(spec, controls),
        control=Control(controls),
        load=Load(store, group, w.metrics),
        order=Order(store, group, clock),
        handle=Handle(
            spec,
            w.deps,
            store,
            clock,
            w.metrics,
            random.Random(),
            w.sealer,
            release,
            group,
            messages=letters.messages,
            on_outbox=letters.on_outbox,
        ),
        commit=Commit(
            spec, store, clock, w.metrics, w.guard, letters.messages, letters, group, on_committed, release
        ),
    )


@dataclass(frozen=True)
class KernelSteps:
    decode: Decode
    route: Route
    control: Control
    load: Load
    order: Order
    handle: Handle
    commit: Commit


def record_path(k: KernelSteps, plugs: Plugs, parked: ParkedItems, metrics: Metrics) -> Chain:
    return Chain(
        k.decode,
        k.route,
        *plugs.verify,
        k.control,
        k.load,
        *plugs.pin,
        k.order,
        k.handle,
        k.commit,
        parked=parked,
        observers=[Measured(metrics), *plugs.observers],
    )


def assembled(
    w: Wiring, letters: Letters, plugs: Plugs, *, on_committed: Callable[[list[OutboxRow]], None]
) -> tuple[KernelSteps, Chain]:
    """The kernel's steps and the record path they make with ``plugs``: a process's and a
    test's (tests.support.kernel) are put together the same way."""
    steps = kernel_steps(w, letters, plugs.controls, on_committed=on_committed)
    return steps, record_path(steps, plugs, ParkedItems(w.store), w.metrics)


@dataclass
class ParkedItems:
    """Records parked for a workflow, as items to drain (Via.DRAIN), oldest first."""

    store: Store

    async def next_item(self, workflow_id: str) -> Item | None:
        row = await self.store.next_parked(workflow_id)
        if row is None:
            return None
        rec = Record(
            row.topic, row.partition, row.offset, row.key, row.value, tuple(row.headers), row.timestamp_ms
        )
        return Item(rec, via=Via.DRAIN, attempt=row.attempt, parked_id=row.id)


@dataclass
class Measured:
    """The handle-latency histogram (read to a finished item), and the hop trace's stages."""

    metrics: Metrics
    stage_of: Mapping[str, str] = field(
        default_factory=lambda: {"decode": "decoded", "load": "loaded", "handle": "handled"}
    )

    def passed(self, step: str, item: Item) -> None:
        if not hoptrace.enabled():
            return
        event_id = item.decoded.envelope.event_id
        if step == "decode":
            hoptrace.mark_at(item.record.fetched_ns, "fetched", event_id)
            hoptrace.mark_at(item.dispatched_ns, "dispatched", event_id)
        if step in self.stage_of:
            hoptrace.mark(self.stage_of[step], event_id)

    def done(self, item: Item, done: Done) -> None:
        if item.event is None or done.finish in (Finish.NOT_OURS, Finish.DEFERRED):
            return
        if item.via is Via.DELIVERY:
            elapsed = time.perf_counter() - item.started
            self.metrics.handle_latency.labels(item.event.event_type).observe(elapsed)
        if done.finish is Finish.COMMITTED and hoptrace.enabled():
            hoptrace.mark("committed", item.event.envelope.event_id)
            hoptrace.link(item.event.envelope.event_id, list(item.published))


def run_counted(chain: Chain, metrics: Metrics) -> Callable[[Record], Any]:
    """What the lanes call per record: the chain, with the in-flight gauge around it."""

    async def run(record: Record) -> None:
        metrics.in_flight.inc()
        try:
            await chain.run(record)
        finally:
            metrics.in_flight.dec()

    return run
