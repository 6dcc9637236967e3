"""Who puts each event on its topic, and who takes it off: the registry's topic-wide lists
narrowed to one event type by the services' declarations and their source.

- ``ServiceSpec.produces`` (or ``EDGES.produces``) names the types a service puts out; the
  ones its code only schedules as a timer target (``chorus.tools.codescan``) are published
  by the timer service (the service that handles ``timer.schedule``) when they fall due.
- ``chorus-runtime`` on a topic means every runtime service: the types the runtime's own
  source constructs there (dead letters, reviews, data answers), or schedules (retries).
- workflows.yaml: the gateway publishes the start event of each workflow type.
- principals.yaml: the dead-letter service (the owner of ``event.dead_lettered``'s topic)
  writes the topics it redrives onto: every event there may come again from it.

A type that a service both emits at once and schedules shows as scheduled (the source says
it schedules it; what it emits is not traced through the handlers' outcomes).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import chorus
from chorus.base.compat import StrEnum
from chorus.contracts.base import CATALOG
from chorus.contracts.platform import EventDeadLettered, TimerSchedule
from chorus.contracts.registry import RUNTIME_PRODUCER, Registry
from chorus.runtime.runner import RUNTIME_CONTROLS
from chorus.tools.codescan import scan_package
from chorus.tools.declarations import Declarations

START_PUBLISHER = "gateway"
"""Publishes the start event of every workflow type (Registry checks its topic lists it)."""


class Route(StrEnum):
    """How an event gets onto its topic."""

    STARTS = "starts"
    """The gateway publishes it when a workflow of a type it starts is submitted."""
    EMITS = "emits"
    """The service's outbox (for chorus-runtime: every runtime service's)."""
    SCHEDULES = "schedules"
    """A timer's target: the service schedules it, the timer service publishes it when due."""
    REDRIVES = "redrives"
    """The dead-letter service publishes a dead letter's original record again (an operator's redrive)."""
    LISTED = "listed"
    """The registry lists the service on the topic; its code was not read."""


@dataclass(frozen=True)
class Producer:
    service: str
    route: Route
    published_by: str
    workflows: tuple[str, ...] = ()
    """For Route.STARTS: the workflow types it starts."""


@dataclass(frozen=True)
class Consumer:
    service: str
    reads_version: int | None
    """The version its code reads (older ones are upcast); None without a ServiceSpec."""
    handler: str | None
    handler_file: str | None


NOT_THE_RUNTIME = frozenset({"platform", "reference", "tools", "contracts"})
"""Subpackages of ``chorus`` that are not the runtime every service runs."""


class Routes:
    """Producers and consumers per event type, for one registry and its services' code."""

    def __init__(self, registry: Registry, declarations: Declarations, show: Callable[[Path], str]) -> None:
        self.registry = registry
        self.declarations = declarations
        self.show = show
        self.timer_publisher = self._handler_of(TimerSchedule.event_type)
        self.redriver = self._owner_of(EventDeadLettered.event_type)
        types = {m.__name__: t for (t, _), m in CATALOG.items() if registry.knows(t)}
        # The runtime, without what shares its namespace: the services, the tooling, the
        # contracts (what they emit is theirs, not every runtime service's).
        runtime = scan_package(Path(chorus.__file__).resolve().parent, NOT_THE_RUNTIME)
        self.runtime_emits = {types[n] for n in runtime.called if n in types}
        self.runtime_schedules = {types[n] for n in runtime.own_schedules() if n in types}
        self.scheduled = {
            name: {types[n] for n in scan_package(d.folder).schedules(runtime.helpers) if n in types}
            for name, d in declarations.services.items()
        }

    def producers(self, event_type: str) -> list[Producer]:
        topic = self.registry.topic_for(event_type)
        found: dict[str, Producer] = {}
        for name, declared in self.declarations.services.items():
            if event_type in declared.edges.produces:
                found[name] = self._producer(name, event_type in self.scheduled[name])
        if RUNTIME_PRODUCER in topic.producers and event_type in self.runtime_emits:
            found[RUNTIME_PRODUCER] = self._producer(RUNTIME_PRODUCER, event_type in self.runtime_schedules)
        starts = tuple(sorted(w for w, d in self.registry.workflows.items() if d.start == event_type))
        if starts:
            found[START_PUBLISHER] = Producer(START_PUBLISHER, Route.STARTS, START_PUBLISHER, starts)
        for name in topic.producers:
            if name in self.declarations.missing:
                found.setdefault(name, Producer(name, Route.LISTED, name))
        if not found:  # nothing in the code says who: the registry's word stands
            found = {name: Producer(name, Route.LISTED, name) for name in topic.producers}
        redrives = self.registry.principals.services.get(self.redriver or "")
        if self.redriver and redrives and topic.topic in redrives.writes:
            found.setdefault(self.redriver, Producer(self.redriver, Route.REDRIVES, self.redriver))
        order = list(Route)
        return sorted(found.values(), key=lambda p: (order.index(p.route), p.service))

    def consumers(self, event_type: str) -> list[Consumer]:
        found = self._runtime_answers(event_type)
        for name, declared in sorted(self.declarations.services.items()):
            route = declared.spec.handler_for(event_type) if declared.spec else None
            if route is not None:
                handler = route.handler
                where = self.show(Path(inspect.getfile(handler)))
                qualified = f"{handler.__module__}.{handler.__qualname__}"
                found.append(Consumer(name, route.event.version, qualified, where))
            elif event_type in declared.edges.consumes:
                found.append(Consumer(name, None, None, None))
        return found

    def _runtime_answers(self, event_type: str) -> list[Consumer]:
        """The runtime of every service answers the control messages (chorus.runtime.runner)."""
        for model, handler in RUNTIME_CONTROLS.items():
            if model.event_type == event_type:
                where = self.show(Path(inspect.getfile(handler)))
                qualified = f"{handler.__module__}.{handler.__qualname__}"
                return [Consumer(RUNTIME_PRODUCER, model.version, qualified, where)]
        return []

    def _producer(self, service: str, scheduled: bool) -> Producer:
        if scheduled and self.timer_publisher:
            return Producer(service, Route.SCHEDULES, self.timer_publisher)
        return Producer(service, Route.EMITS, service)

    def _handler_of(self, event_type: str) -> str | None:
        """The service whose code handles ``event_type`` (the timer service: timer.schedule)."""
        for name, declared in sorted(self.declarations.services.items()):
            if declared.spec and declared.spec.handler_for(event_type):
                return name
        return self._owner_of(event_type)

    def _owner_of(self, event_type: str) -> str | None:
        return self.registry.topic_for(event_type).owner if self.registry.knows(event_type) else None


def producer_phrase(producer: Producer) -> str:
    """How ``producer`` puts the event on its topic, in words (the text and the docs alike)."""
    who = _who(producer.service)
    match producer.route:
        case Route.STARTS:
            return f"{who}: publishes it to start a workflow of type {', '.join(producer.workflows)}"
        case Route.SCHEDULES:
            return f"scheduled by {who}, published by {producer.published_by} when the timer falls due"
        case Route.REDRIVES:
            return f"{who}: publishes it again when an operator redrives its dead letter"
        case Route.LISTED:
            return f"{who}: listed on the topic by the registry (its code was not read)"
    return f"{who}: emits it"


def consumer_phrase(consumer: Consumer) -> str:
    if consumer.handler is None:
        return f"{consumer.service} (not on the runtime: its EDGES declare it)"
    reads = f"reads v{consumer.reads_version}: {consumer.handler}"
    return f"{_who(consumer.service)} {reads} ({consumer.handler_file})"


def _who(service: str) -> str:
    return f"every runtime service ({service})" if service == RUNTIME_PRODUCER else service


def readers_phrase(readers: list[str]) -> str:
    return ", ".join(_who(r) for r in readers) or "nobody"
