"""The testing kit: run a service's handlers in memory, without Kafka or PostgreSQL.

Handler unit tests build typed events, deliver them to a :class:`WorkflowHarness` (the
service's spec, its dependencies, a manual clock) and look at what each step decided:
the new state, the events emitted, the timers, the effects. The harness keeps each
workflow's checkpoint in memory the way the runtime keeps it in PostgreSQL: a step's
``Outcome.state`` (or its last ``ctx.checkpoint``) is what the next event of that
workflow sees. Retries, dead letters and transactions are the runtime's, and are tested
against real infrastructure; here a handler's exception simply propagates. Like the
runtime, the harness refuses an outcome that emits undeclared types, and stores states
through JSON and the spec's state model.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel

from chorus.base.clock import ManualClock
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Priority, ProducerRef
from chorus.kernel.codec import Event
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.service import Context, Emit, Outcome, ServiceSpec, check_outcome
from chorus.outside.dependencies import Dependency

TEST_PRODUCER = ProducerRef(service="test", version="0")


def make_event(
    payload: EventModel,
    *,
    workflow_id: str | None = None,
    workflow_type: str = "test",
    priority: Priority = "normal",
    at: datetime | None = None,
    attempt: int = 1,
    subject_ref: str | None = None,
    producer: ProducerRef = TEST_PRODUCER,
    traceparent: str | None = None,
) -> Event[Any]:
    """``payload`` in a fresh envelope of its own (as if just read from its topic), stated
    by ``producer`` (a handler that trusts some producers more than others tests both), in
    the trace of ``traceparent`` (a new one without)."""
    envelope = start_envelope(
        payload,
        workflow_id=workflow_id or f"wf-{uuid.uuid4().hex[:12]}",
        workflow_type=workflow_type,
        producer=producer,
        now=at or datetime.now(timezone.utc),
        idempotency_key=f"test-{uuid.uuid4()}",
        priority=priority,
        subject_ref=subject_ref,
        traceparent=traceparent,
    )
    if attempt != 1:
        envelope = envelope.model_copy(update={"attempt": attempt})
    return Event(envelope=envelope, payload=payload, raw=b"", received_version=payload.version)


@dataclass
class Step:
    """What one delivery decided."""

    event: Event[Any]
    outcome: Outcome[Any]
    checkpoints: list[BaseModel]
    """States the handler committed mid-step (``ctx.checkpoint``), in order."""
    progress: list[EventModel] = field(default_factory=list)
    """Events it published with them (``ctx.checkpoint(state, emit=...)``), in order."""

    @property
    def emitted(self) -> list[EventModel]:
        return [item.event if isinstance(item, Emit) else item for item in self.outcome.emit]

    def emitted_types(self) -> list[str]:
        return [e.event_type for e in self.emitted]

    def first(self, model: type[EventModel]) -> Any:
        """The first emitted event of ``model``'s type (AssertionError when there is none)."""
        found = [e for e in self.emitted if isinstance(e, model)]
        assert found, f"no {model.event_type} among {self.emitted_types()}"
        return found[0]


@dataclass
class WorkflowHarness:
    """One service's handlers, with its dependencies and a clock, over in-memory checkpoints."""

    spec: ServiceSpec[Any, Any]
    deps: Any = None
    clock: ManualClock = field(
        default_factory=lambda: ManualClock(datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc))
    )
    states: dict[str, BaseModel | None] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    def event(self, payload: EventModel, workflow_id: str, **envelope: Any) -> Event[Any]:
        """``payload`` for ``workflow_id``, occurring now on the harness's clock."""
        return make_event(payload, workflow_id=workflow_id, at=self.clock.now(), **envelope)

    async def deliver(
        self,
        payload: EventModel | Event[Any],
        workflow_id: str | None = None,
        *,
        attempt: int = 1,
        feedback: list[str] | None = None,
        **envelope: Any,
    ) -> Step:
        """Run the handler for ``payload`` on the workflow's current state, keep its new state.
        ``feedback``: what a semantic retry passes on (``ctx.feedback``), the errors of the
        ``SemanticError`` the previous try raised."""
        event = (
            payload
            if isinstance(payload, Event)
            else self.event(payload, workflow_id or "wf-test", **envelope)
        )
        route = self.spec.handler_for(event.event_type)
        assert route is not None, f"{self.spec.name} has no handler for {event.event_type}"
        workflow = event.envelope.workflow_id
        checkpoints: list[BaseModel] = []
        progress: list[EventModel] = []

        async def checkpoint(state: BaseModel, emit: Sequence[EventModel]) -> None:
            if emit:
                check_outcome(self.spec, Outcome(emit=list(emit)))
            checkpoints.append(state)
            progress.extend(emit)
            self.states[workflow] = self._stored(state)

        ctx: Context[Any] = Context(
            service=self.spec.name,
            deps=self.deps,
            clock=self.clock,
            envelope=event.envelope,
            attempt=attempt,
            feedback=list(feedback or []),
            log=logging.LoggerAdapter(logging.getLogger(self.spec.name)),
            _checkpoint=checkpoint,
        )
        outcome = await route.handler(event, self.states.get(workflow), ctx)
        check_outcome(self.spec, outcome)  # what the runtime would dead-letter fails here too
        if outcome.state is not None:
            self.states[workflow] = self._stored(outcome.state)
        step = Step(event, outcome, checkpoints, progress)
        self.steps.append(step)
        return step

    def _stored(self, state: BaseModel) -> BaseModel | None:
        """The state as the next event sees it: through JSON and the spec's state model, as
        the runtime stores and loads it (no state at all for a service without a model)."""
        if self.spec.state is None:
            return None
        stored: BaseModel = self.spec.state.model_validate(state.model_dump(mode="json"))
        return stored

    def state(self, workflow_id: str) -> Any:
        return self.states.get(workflow_id)


class Unguarded:
    """Dependencies with no rate limit and no circuit breaker: for handler tests, which have
    no database (the real guards live in PostgreSQL; see chorus.outside.dependencies)."""

    async def guard(self, dependency: Dependency) -> Unguarded:
        return self

    def call(self) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()


__all__ = ["Step", "Unguarded", "WorkflowHarness", "make_event"]
