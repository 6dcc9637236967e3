"""Events of the platform itself: durable timers, retries, dead letters, human review.

Every service's runtime produces some of these on the service's behalf (a retry
is a timer; a poison event is a dead letter), so their topics list the
pseudo-producer ``chorus-runtime``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from chorus_contracts.base import EventModel, Model, Name, UtcDateTime, event

ErrorCategory = Literal["transient", "persistent", "semantic", "decode", "unexpected"]


class KafkaHeader(Model):
    key: str
    value_b64: str | None = None


class OriginalRecord(Model):
    """A Kafka record exactly as it was read, so it can be inspected and sent back."""

    topic: Name
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    key_b64: str | None = None
    value_b64: str = Field(description="the record's original bytes, base64")
    headers: list[KafkaHeader] = []
    timestamp_ms: int | None = None
    value_omitted: bool = Field(
        default=False,
        description="the bytes were too large to repeat (value_b64 is empty); they stay at "
        "topic/partition/offset until the topic's retention removes them",
    )
    value_size: int | None = None
    value_sha256: str | None = None


class Failure(Model):
    at: UtcDateTime
    attempt: int = Field(ge=1)
    error_class: Name
    message: str
    retry_in_s: float | None = Field(
        default=None, description="the backoff chosen after this failure, when it was retried"
    )


class FireTarget(Model):
    """What a timer publishes when it falls due: an envelope, verbatim, to a topic."""

    topic: Name
    key: Name
    value: dict[str, Any] = Field(description="the envelope (JSON object) to publish")


@event("timer.schedule", 1)
class TimerSchedule(EventModel):
    """Command: fire ``fire`` at ``due_at``. Scheduling an existing timer_id again is a no-op."""

    timer_id: Name
    due_at: UtcDateTime
    fire: FireTarget
    purpose: Literal["retry", "deadline", "escalation", "reminder", "other"] = "other"


@event("timer.cancel", 1)
class TimerCancel(EventModel):
    """Command: the timer must not fire. Cancelling a fired or unknown timer is a no-op."""

    timer_id: Name
    reason: str = ""


@event("timer.reschedule", 1)
class TimerReschedule(EventModel):
    """Command: move a pending timer to a new due time (it still fires once)."""

    timer_id: Name
    due_at: UtcDateTime


@event("retry.due", 1)
class RetryDue(EventModel):
    """A durable backoff ended: ``service`` handles ``original`` again as ``attempt``."""

    service: Name
    consumer_group: Name
    attempt: int = Field(ge=2)
    original: OriginalRecord
    failures: list[Failure]


class ErrorDetail(Model):
    category: ErrorCategory
    error_class: Name
    message: str
    traceback: str = ""
    pointer: str | None = Field(default=None, description="JSON pointer to the failing field")


@event("event.dead_lettered", 1)
class EventDeadLettered(EventModel):
    """A record a service could not process, with everything needed to fix and redrive it."""

    service: Name
    service_version: Name
    consumer_group: Name
    original: OriginalRecord
    error: ErrorDetail
    attempts: int = Field(ge=1)
    failures: list[Failure]
    original_event_type: str | None = None
    original_event_id: str | None = None
    original_workflow_id: str | None = None


@event("event.discarded", 1)
class EventDiscarded(EventModel):
    """An operator discarded a dead letter: the service stops waiting for that event."""

    service: Name
    consumer_group: Name
    discarded_event_id: Name
    reason: str
    actor: Name


@event("review.requested", 1)
class ReviewRequested(EventModel):
    """A handler's output kept failing validation; a person has to look at it."""

    service: Name
    reason: str
    validation_errors: list[str]
    attempts: int = Field(ge=1)
    original_event_type: Name
    original_event_id: Name
