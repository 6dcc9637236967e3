"""The events a step publishes: an outcome's events and timer commands, a durable retry,
a dead letter, a request for review. Each is an outbox row built from the registry (topic,
lane, size limit), with an id derived from its cause so that a step that runs twice emits
the same ids twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from chorus.base.errors import Category
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.platform import (
    Failure,
    RetryDue,
    ReviewRequested,
    TimerCancel,
    TimerReschedule,
    TimerSchedule,
)
from chorus.contracts.registry import Registry
from chorus.contracts.strictjson import storable
from chorus.kernel.deadletters import dead_letter_envelope
from chorus.kernel.envelopes import child_envelope
from chorus.kernel.outbox import fire_target, outbox_message
from chorus.kernel.ports import Sealing, Signer
from chorus.kernel.records import Record, to_original
from chorus.kernel.service import CancelTimer, Emit, Outcome, RescheduleTimer, ScheduleTimer, ServiceSpec
from chorus.kernel.store import OutboxMessage

MAX_TEXT = 4000  # chorus.contracts.base.Text
_PURPOSES = {"retry", "deadline", "escalation", "reminder", "other"}


@dataclass
class Messages:
    spec: ServiceSpec[Any, Any]
    registry: Registry
    producer: ProducerRef
    group: str
    signer: Signer | None = None
    sealer: Sealing | None = None
    rerun: str = ""
    """A reset's id while its point's event is handled again: what the step emits are new
    events (their ids derive from it too), so no consumer takes one for the first run's; its
    retries are new timers too. (Timers a handler names keep their names: the timer service
    keeps the first run's.)"""

    def rerunning(self, reset_id: str | None) -> Messages:
        return replace(self, rerun=f"{reset_id}/") if reset_id else self

    async def message(self, envelope: Envelope) -> OutboxMessage:
        return outbox_message(self.registry, await self._sealed(envelope), self.signer)

    async def _sealed(self, envelope: Envelope) -> Envelope:
        return await self.sealer.seal(envelope) if self.sealer is not None else envelope

    def _child(
        self,
        parent: Envelope,
        event: EventModel,
        now: datetime,
        position: str,
        traceparent: str,
        **overrides: Any,
    ) -> Envelope:
        return child_envelope(
            parent,
            event,
            producer=self.producer,
            now=now,
            position=f"{self.rerun}{position}",
            traceparent=traceparent,
            **overrides,
        )

    async def progress(
        self, env: Envelope, events: Sequence[EventModel], now: datetime, traceparent: str, checkpoint: str
    ) -> list[OutboxMessage]:
        """What a step publishes with a checkpoint, mid-step (``ctx.checkpoint(emit=...)``):
        placed by the checkpoint (its time, the try, its number in the try), so each
        checkpoint's events are events of their own."""
        return [
            await self.message(self._child(env, event, now, f"progress/{checkpoint}/{i}", traceparent))
            for i, event in enumerate(events)
        ]

    async def outcome(
        self, env: Envelope, outcome: Outcome[Any], now: datetime, traceparent: str
    ) -> list[OutboxMessage]:
        messages: list[OutboxMessage] = []
        for index, item in enumerate(outcome.emit):
            # Events of one step are stamped a microsecond apart in emit order, so any
            # timeline (merging topics) orders them as the handler did.
            stamped = now + timedelta(microseconds=index)
            if isinstance(item, Emit):
                child = self._child(
                    env, item.event, stamped, f"emit/{index}", traceparent, **item.overrides()
                )
            else:
                child = self._child(env, item, stamped, f"emit/{index}", traceparent)
            messages.append(await self.message(child))
        for index, timer in enumerate(outcome.timers):
            timer_id = f"{self.spec.name}:{env.workflow_id}:{timer.timer_id}"
            command: EventModel
            if isinstance(timer, ScheduleTimer):
                # Sealed and signed now: the timer service keeps it, and publishes it, as it
                # is; it occurs when it is due.
                fired = await self._sealed(
                    self._child(env, timer.event, timer.due_at, f"timer/{timer.timer_id}", traceparent)
                )
                command = TimerSchedule(
                    timer_id=timer_id,
                    due_at=timer.due_at,
                    fire=fire_target(self.registry, fired, self.signer),
                    purpose=timer.purpose if timer.purpose in _PURPOSES else "other",  # type: ignore[arg-type]
                )
            elif isinstance(timer, CancelTimer):
                command = TimerCancel(timer_id=timer_id, reason=timer.reason)
            else:
                assert isinstance(timer, RescheduleTimer)
                command = TimerReschedule(timer_id=timer_id, due_at=timer.due_at)
            messages.append(
                await self.message(self._child(env, command, now, f"timer-cmd/{index}", traceparent))
            )
        return messages

    async def retry(
        self,
        env: Envelope,
        rec: Record,
        attempt: int,
        failures: list[Failure],
        now: datetime,
        wait_s: float,
        traceparent: str,
    ) -> OutboxMessage:
        due = RetryDue(
            service=self.spec.name,
            consumer_group=self.group,
            attempt=attempt + 1,
            original=to_original(rec),
            failures=failures,
        )
        due_at = now + timedelta(seconds=wait_s)
        fired = await self._sealed(self._child(env, due, due_at, f"retry/{attempt + 1}", traceparent))
        schedule = TimerSchedule(
            # In its service's namespace, as every timer: the timer service takes a command
            # only for a timer of the service that signed it.
            timer_id=f"{self.spec.name}:retry:{self.group}:{env.event_id}:{self.rerun}{attempt + 1}",
            due_at=due_at,
            fire=fire_target(self.registry, fired, self.signer),
            purpose="retry",
        )
        return await self.message(self._child(env, schedule, now, f"retry-timer/{attempt + 1}", traceparent))

    async def dead_letter(
        self,
        rec: Record,
        error: BaseException,
        category: Category,
        attempts: int,
        failures: Sequence[Failure],
        now: datetime,
        *,
        parent: Envelope | None = None,
        traceparent: str | None = None,
    ) -> OutboxMessage:
        envelope = dead_letter_envelope(
            rec,
            error,
            category,
            producer=self.producer,
            consumer_group=self.group,
            now=now,
            attempts=attempts,
            failures=failures,
            parent=parent,
            traceparent=traceparent,
        )
        return await self.message(envelope)

    async def review(
        self, env: Envelope, errors: list[str], attempts: int, now: datetime, traceparent: str
    ) -> OutboxMessage:
        failed = f"{env.event_type} output failed validation {attempts} times"
        body = ReviewRequested(
            service=self.spec.name,
            # The last error says what the reviewer decides on (a loop's limit says its spend).
            reason=f"{failed}: {storable(errors[-1])[:1000]}" if errors else failed,
            validation_errors=[storable(e)[:MAX_TEXT] for e in errors[-20:]],
            attempts=attempts,
            original_event_type=env.event_type,
            original_event_id=str(env.event_id),
        )
        return await self.message(self._child(env, body, now, "review", traceparent))
