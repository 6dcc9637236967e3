"""handle: call the handler on the workflow's checkpoint, and say how it ended (a Result).

The checkpoint is brought up to the service's state version first (forward only); an
event of a workflow this service saw end is dropped (recorded, never handled), and one
whose checkpoint this code cannot read is dead-lettered with the checkpoint untouched.

Semantic failures re-run the handler with the validation feedback (up to the route's
``semantic_attempts``, then a person reviews). Transient and unexpected failures become
a durable :class:`Retry` with full-jitter backoff until the route's attempts are spent;
persistent ones, an invalid model the handler built, and spent retries become a
:class:`DeadLetter`. Nothing here touches the database except ``ctx.checkpoint``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from chorus.base.clock import Clock
from chorus.base.errors import (
    Category,
    HandlerTimeoutError,
    KeyStoreUnavailableError,
    PersistentError,
    SemanticError,
    TransientError,
)
from chorus.base.logs import fields, hide_in_logs
from chorus.base.metrics import Metrics
from chorus.base.tracing import Attributes, building, handling_span
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.platform import Failure
from chorus.kernel.backoff import full_jitter
from chorus.kernel.chain import Again, Item
from chorus.kernel.codec import Event, upcast
from chorus.kernel.messages import Messages
from chorus.kernel.messaging import Delivery
from chorus.kernel.ports import Sealing
from chorus.kernel.results import DeadLetter, Dropped, Frame, Result, Retry, Review, Succeeded
from chorus.kernel.service import Context, On, Outcome, ServiceSpec, check_outcome
from chorus.kernel.store import Checkpoint, ConflictError, OutboxMessage, StateRow, Store

T = TypeVar("T")

log = logging.getLogger("chorus.pipeline")


@dataclass
class Handle:
    spec: ServiceSpec[Any, Any]
    deps: Any
    store: Store
    clock: Clock
    metrics: Metrics
    rng: random.Random
    sealer: Sealing | None = None
    release: str | None = None
    """A workflow's first checkpoint is pinned to this release (chorus.releases)."""
    group: str = ""
    """The consumer group it reads as (its spans say so)."""
    messages: Messages | None = None
    """Builds what a checkpoint publishes (``ctx.checkpoint(state, emit=...)``)."""
    on_outbox: Callable[[], None] = lambda: None
    """A checkpoint published something (the relay reads it)."""
    name: str = "handle"

    async def __call__(self, item: Item) -> Item | Again:
        event, route = item.decoded, item.route
        assert item.loaded is not None and route is not None
        state = item.loaded.state
        ended = state.ended if state is not None else None
        frame, refused = self._frame(state)
        env = event.envelope
        result: Result
        try:
            if ended is not None and (
                env.event_type != WorkflowEnded.event_type or _another_end(event, ended)
            ):
                result, traceparent = Dropped(f"workflow ended ({ended})"), env.traceparent
            elif refused is not None:
                self.metrics.failures.labels(refused.category, env.event_type).inc()
                result, traceparent = DeadLetter(refused, refused.category), env.traceparent
            else:
                result, traceparent = await self.run(route, event, frame, item, item.failures)
        except ConflictError:  # a mid-step checkpoint found the workflow moved on
            log.info("checkpoint moved under us; reloading", extra=fields(via=item.via.value))
            return Again("load")
        item.frame, item.result, item.traceparent = frame, result, traceparent
        return item

    def _frame(self, state: StateRow | None) -> tuple[Frame, PersistentError | None]:
        """The frame this handling builds on, or the reason it cannot read the checkpoint:
        then the event is dead-lettered and the checkpoint written back exactly as stored."""
        try:
            migrated, version, refused = self.migrated(state), self.spec.state_version, None
        except PersistentError as exc:
            assert state is not None
            migrated, version, refused = state.state, state.state_version, exc
        frame = Frame(
            revision=state.revision if state else None,
            state_version=version,
            parked_on=state.parked_on if state else None,
            state=migrated,
            ended=state.ended if state else None,
        )
        return frame, refused

    async def checkpoint(
        self,
        env: Envelope,
        frame: Frame,
        state: BaseModel,
        emit: Sequence[EventModel],
        traceparent: str,
        attempt: int,
    ) -> None:
        """``ctx.checkpoint``: the handler's state committed now, mid-step, with the events it
        publishes so far."""
        body = state.model_dump(mode="json")
        messages: list[OutboxMessage] = []
        if emit:
            check_outcome(self.spec, Outcome(emit=list(emit)))
            if self.messages is None:
                raise PersistentError("this runtime publishes nothing mid-step (no message builder)")
            now = self.clock.now()
            where = f"{now.isoformat()}/{attempt}/{frame.checkpoints}"
            messages = await self.messages.progress(env, emit, now, traceparent, where)
        frame.revision = await self.store.checkpoint(
            Checkpoint(
                workflow_id=env.workflow_id,
                workflow_type=env.workflow_type,
                state=body,
                state_version=self.spec.state_version,
                expected_revision=frame.revision,
                parked_on=frame.parked_on,
                subject_ref=env.subject_ref,
                now=self.clock.now(),
                release=self.release,
                event_id=env.event_id,
                event_type=env.event_type,
                messages=messages,
            )
        )
        frame.state = body
        frame.checkpoints += 1
        if messages:
            self.on_outbox()

    def migrated(self, row: StateRow | None) -> dict[str, Any] | None:
        """The checkpoint's state brought up to the service's state version."""
        if row is None or row.state is None:
            return None
        return self.spec.upgraded(row.state, row.state_version)

    async def run(
        self,
        route: On,
        event: Event[EventModel],
        frame: Frame,
        item: Item,
        failures: list[Failure],
    ) -> tuple[Result, str]:
        """Call the handler, with semantic re-tries; classify how it ended. Returns the
        result and the traceparent of the handling span (its events' parent)."""
        env = event.envelope
        attempt = item.tries
        feedback: list[str] = []
        name, attributes = self._span(item, env) if building() else ("", {})
        with handling_span(name, env.traceparent, attributes) as traceparent:
            for _ in range(route.semantic_attempts):
                try:
                    called = self._call(route, event, frame, attempt, feedback, traceparent)
                    return Succeeded(await called), traceparent
                except SemanticError as exc:
                    self.metrics.failures.labels("semantic", env.event_type).inc()
                    feedback.extend(exc.errors)
                    log.warning("semantic failure; re-running with feedback", extra=fields(errors=exc.errors))
                    continue
                except (ConflictError, KeyStoreUnavailableError):
                    raise  # the database or the key store: infrastructure, the record comes again
                except TransientError as exc:
                    return self._transient(route, route.max_attempts, exc, "transient", attempt), traceparent
                except PersistentError as exc:
                    self.metrics.failures.labels(exc.category, env.event_type).inc()
                    return DeadLetter(exc, exc.category), traceparent
                except ValidationError as exc:
                    # A state or emitted model the handler built is invalid: the code is wrong.
                    self.metrics.failures.labels("persistent", env.event_type).inc()
                    return DeadLetter(exc, "persistent"), traceparent
                except Exception as exc:
                    limit = self.spec.unexpected_max_attempts
                    return self._transient(route, limit, exc, "unexpected", attempt), traceparent
            return Review(feedback), traceparent

    def _span(self, item: Item, env: Envelope) -> tuple[str, Attributes]:
        """The handling span's name and attributes (worked out only when spans are built:
        this is every record's path)."""
        record = item.record
        key = record.key.decode("utf-8", "replace") if record.key else None
        delivery = Delivery(record.topic, record.partition, record.offset, self.group, str(env.event_id), key)
        return delivery.span_name, {
            **delivery.attributes(),
            "chorus.service": self.spec.name,
            "chorus.event_type": env.event_type,
            "chorus.workflow_id": env.workflow_id,
            "chorus.attempt": item.tries,
        }

    async def _call(
        self,
        route: On,
        event: Event[EventModel],
        frame: Frame,
        attempt: int,
        feedback: list[str],
        traceparent: str,
    ) -> Any:
        env = event.envelope
        if route.personal:
            event = await self._opened(route, event)
        state_model = self.spec.state
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
            _checkpoint=lambda s, emit: self.checkpoint(env, frame, s, emit, traceparent, attempt),
            _open=self._open,
        )
        outcome = await self._within(route.handler(event, state, ctx), route.timeout_s)
        check_outcome(self.spec, outcome)
        return outcome

    async def _opened(self, route: On, event: Event[EventModel]) -> Event[EventModel]:
        """The event with its own personal fields opened (and hidden from log lines)."""
        if self.sealer is None:
            raise PersistentError(
                f"{route.event.event_type} needs personal data, and no key store is configured"
            )
        opened = await self.sealer.open_event(event.envelope)
        hide_in_logs([v for k, v in opened.items() if v is not event.envelope.payload.get(k)])
        if event.received_version < route.event.version:  # as decode does for the sealed form
            opened = upcast(route.event.event_type, opened, event.received_version, route.event.version)
        return replace(event, payload=route.event.model_validate(opened))

    async def _open(self, token: str) -> Any:
        if self.sealer is None:
            raise PersistentError("sealed personal data, and no key store is configured")
        value = await self.sealer.open(token)
        hide_in_logs(value)
        return value

    async def _within(self, work: Awaitable[T], timeout_s: float) -> T:
        """``work``'s result, or HandlerTimeoutError once ``timeout_s`` of the service's clock
        has passed: real time in production, and a test that moves the shared clock past
        a task timeout sees it fire (as a handler's own ``ctx.clock.sleep`` would end)."""
        task = asyncio.ensure_future(work)
        timer = asyncio.ensure_future(self.clock.sleep(timeout_s))
        try:
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled from outside (shutdown, a revoked partition)
            task.cancel()
            raise
        finally:
            timer.cancel()
        if not task.done():  # the clock passed the task timeout first
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise HandlerTimeoutError(f"handler ran longer than its {timeout_s}s timeout")
        return task.result()

    def _transient(
        self, route: On, max_attempts: int, exc: BaseException, category: Category, attempt: int
    ) -> Result:
        self.metrics.failures.labels(category, route.event.event_type).inc()
        if attempt >= max_attempts:
            return DeadLetter(exc, category)
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
        return Retry(exc, category, wait)


def _another_end(event: Event[EventModel], ended: str) -> bool:
    """A second, different end of a workflow this service saw end (a cancel that crossed a
    completion): the first one stands, and its compensation must not run again. The same
    end again (the service's own, coming back) is handled as usual."""
    payload = event.payload
    return isinstance(payload, WorkflowEnded) and payload.outcome != ended
