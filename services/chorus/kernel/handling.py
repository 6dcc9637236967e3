"""The handle and classify steps: call the handler, and say how it ended.

Semantic failures re-run the handler with the validation feedback (up to the route's
``semantic_attempts``, then a person reviews). Transient and unexpected failures become
a durable :class:`Retry` with full-jitter backoff until the route's attempts are spent;
persistent ones, an invalid model the handler built, and spent retries become a
:class:`DeadLetter`. Nothing here touches the database except through ``checkpoint``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from chorus.kernel.backoff import full_jitter
from chorus.kernel.clock import Clock
from chorus.kernel.codec import Event, upcast
from chorus.kernel.errors import (
    Category,
    HandlerTimeoutError,
    NewerStateError,
    PersistentError,
    SemanticError,
    TransientError,
)
from chorus.kernel.logs import fields, hide_in_logs
from chorus.kernel.metrics import Metrics
from chorus.kernel.service import Context, On, ServiceSpec, check_outcome
from chorus.kernel.steps import DeadLetter, Frame, Result, Retry, Review, Succeeded
from chorus.kernel.store import ConflictError, StateRow
from chorus.kernel.tracing import handling_span
from chorus.privacy.crypto import KeyStoreUnavailableError, Sealer
from chorus_contracts.base import EventModel
from chorus_contracts.envelope import Envelope
from chorus_contracts.platform import Failure

T = TypeVar("T")

log = logging.getLogger("chorus.pipeline")

Checkpoint = Callable[[Envelope, Frame, BaseModel], Awaitable[None]]
"""Persist a handler's mid-step checkpoint (``ctx.checkpoint``) on the frame."""


@dataclass
class HandlerCall:
    spec: ServiceSpec[Any, Any]
    deps: Any
    clock: Clock
    metrics: Metrics
    checkpoint: Checkpoint
    rng: random.Random
    sealer: Sealer | None = None

    def migrated(self, row: StateRow | None) -> dict[str, Any] | None:
        """The checkpoint's state brought up to the service's state version (forward only:
        NewerStateError for one a newer version wrote, PersistentError when a migration
        step is missing)."""
        if row is None or row.state is None:
            return None
        state, version = row.state, row.state_version
        if version > self.spec.state_version:
            raise NewerStateError(
                f"the checkpoint of this workflow is state v{version}, written by a newer version of "
                f"{self.spec.name}; this one ({self.spec.version}) reads up to "
                f"v{self.spec.state_version}. Not handled and nothing written (its fields would be "
                "lost): run the newer version, then redrive"
            )
        while version < self.spec.state_version:
            step = self.spec.state_migrations.get(version)
            if step is None:
                raise PersistentError(
                    f"no state migration from v{version} to v{version + 1} in {self.spec.name}"
                )
            state, version = step(state), version + 1
        return state

    async def run(
        self,
        route: On,
        event: Event[EventModel],
        frame: Frame,
        attempt: int,
        failures: list[Failure],
    ) -> tuple[Result, str]:
        """Call the handler, with semantic re-tries; classify how it ended. Returns the
        result and the traceparent of the handling span (its events' parent)."""
        env = event.envelope
        feedback: list[str] = []
        with handling_span(
            self.spec.name,
            env.event_type,
            env.traceparent,
            {"workflow.id": env.workflow_id, "event.id": str(env.event_id), "attempt": str(attempt)},
        ) as traceparent:
            for _ in range(route.semantic_attempts):
                try:
                    return Succeeded(await self._call(route, event, frame, attempt, feedback)), traceparent
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

    async def _call(
        self, route: On, event: Event[EventModel], frame: Frame, attempt: int, feedback: list[str]
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
            _checkpoint=lambda s: self.checkpoint(env, frame, s),
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
