"""Events of the platform itself: durable timers, retries, dead letters, human review.

Every service's runtime produces some of these on the service's behalf (a retry
is a timer; a poison event is a dead letter), so their topics list the
pseudo-producer ``chorus-runtime``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from chorus.contracts.base import (
    Comment,
    EventModel,
    Model,
    Name,
    Personal,
    Text,
    UtcDateTime,
    event,
    upcaster,
)
from chorus.contracts.envelope import MAX_ATTEMPTS

ErrorCategoryV1 = Literal["transient", "persistent", "semantic", "decode", "unexpected"]
ErrorCategory = Literal["transient", "persistent", "semantic", "decode", "unauthorized", "unexpected"]
"""v2 adds ``unauthorized``: a decision event not signed by its registered producer."""

# Bounds of a carried record: Kafka's own (topic names, header key lengths) and the
# largest record any Chorus topic takes (8 MiB, base64). Dead-lettering a record must
# never fail on a bound, so these follow what a broker can hold, not what is sensible.
MAX_RECORD_B64 = 12_000_000
MAX_HEADERS = 1000


class KafkaHeader(Model):
    key: str = Field(max_length=32767)
    value_b64: str | None = Field(default=None, max_length=MAX_RECORD_B64)


class OriginalRecord(Model):
    """A Kafka record exactly as it was read, so it can be inspected and sent back."""

    topic: Name
    partition: int = Field(ge=0, le=2**31 - 1)
    offset: int = Field(ge=0, le=2**53 - 1)
    key_b64: str | None = Field(default=None, max_length=MAX_RECORD_B64)
    value_b64: str = Field(description="the record's original bytes, base64", max_length=MAX_RECORD_B64)
    headers: list[KafkaHeader] = Field(default=[], max_length=MAX_HEADERS)
    headers_omitted: int | None = Field(
        default=None, ge=1, description=f"headers beyond the first {MAX_HEADERS}, not repeated here"
    )
    timestamp_ms: int | None = Field(default=None, ge=-(2**53 - 1), le=2**53 - 1)
    value_omitted: bool = Field(
        default=False,
        description="the bytes were too large to repeat (value_b64 is empty); they stay at "
        "topic/partition/offset until the topic's retention removes them",
    )
    value_size: int | None = Field(default=None, ge=0)
    value_sha256: str | None = Field(default=None, max_length=64)
    outbox_row: str | None = Field(
        default=None,
        max_length=300,
        description="set when the record was never published: the broker refused it from this "
        "outbox row (<service>/<id>), which keeps the bytes; partition and offset are then 0",
    )


class Failure(Model):
    at: UtcDateTime
    attempt: int = Field(ge=1, le=MAX_ATTEMPTS)
    error_class: Name
    message: Text
    retry_in_s: float | None = Field(
        default=None, description="the backoff chosen after this failure, when it was retried"
    )


SIGNATURE_HEADER = "chorus-signature"
"""The Kafka header that carries a signed event's signature (chorus.privacy.signing)."""


class FireTarget(Model):
    """What a timer publishes when it falls due: an envelope, verbatim, to a topic."""

    topic: Name
    key: Name
    value: dict[str, Any] = Field(description="the envelope (JSON object) to publish", max_length=50)
    signature: str | None = Field(
        default=None,
        max_length=200,
        description=f"the {SIGNATURE_HEADER} header to publish it with: its producer's "
        "signature of the envelope, for a signed event type (the timer service relays it, "
        "and cannot make one)",
    )


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
    reason: Text = ""


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
    attempt: int = Field(ge=2, le=MAX_ATTEMPTS)
    original: Personal[OriginalRecord]
    failures: list[Failure] = Field(max_length=1000)


class ErrorDetail(Model):
    category: ErrorCategory
    error_class: Name
    message: Text
    traceback: str = Field(default="", max_length=10000)
    pointer: str | None = Field(default=None, max_length=500, description="JSON pointer to the failing field")


class ErrorDetailV1(ErrorDetail):
    category: ErrorCategoryV1


@event("event.dead_lettered", 2)
class EventDeadLettered(EventModel):
    """A record a service could not process, with everything needed to fix and redrive it."""

    service: Name
    service_version: Name
    consumer_group: Name
    original: Personal[OriginalRecord]
    error: ErrorDetail
    attempts: int = Field(ge=1, le=MAX_ATTEMPTS)
    failures: list[Failure] = Field(max_length=1000)
    original_event_type: str | None = Field(default=None, max_length=200)
    original_event_id: str | None = Field(default=None, max_length=200)
    original_workflow_id: str | None = Field(default=None, max_length=200)


# v1's categories had no ``unauthorized``: an enum only widens in a new version (a v1
# reader could not read it). v1 is v2 with the narrower category; every v1 letter is a
# valid v2 one, and consumers read v2.
@event("event.dead_lettered", 1)
class EventDeadLetteredV1(EventDeadLettered):
    """A record a service could not process, with everything needed to fix and redrive it."""

    error: ErrorDetailV1


@upcaster("event.dead_lettered", 1)
def _dead_lettered_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    return payload


@event("event.discarded", 1)
class EventDiscarded(EventModel):
    """An operator discarded a dead letter: the service stops waiting for that event."""

    service: Name
    consumer_group: Name
    discarded_event_id: Name
    reason: Comment
    actor: Name


BULK_ID_PATTERN = r"^bulk-[0-9a-f]{32}$"
"""A gateway bulk action's id (POST /v1/bulk-actions)."""


def bulk_reason(reason: str, bulk_id: str | None) -> str:
    """An operator's reason as each workflow's audit trail records it: naming the bulk action
    that asked, when one did (the gateway's, the dead-letter and rollout services' alike)."""
    return f"{reason} (bulk action {bulk_id})" if bulk_id else reason


@event("workflow.redrive_requested", 1)
class RedriveRequested(EventModel):
    """An operator asks, through the gateway (a bulk action by query), that the dead letters
    the workflow is waiting on go back to their topics: the dead-letter service redrives each
    of its open letters, with the operator as the operation's actor."""

    requested_by: Name = Field(description="the operator's principal")
    reason: Text = Field(min_length=1)
    bulk_id: str | None = Field(default=None, pattern=BULK_ID_PATTERN, description="the bulk action asking")


@event("review.requested", 1)
class ReviewRequested(EventModel):
    """A handler's output kept failing validation; a person has to look at it."""

    service: Name
    reason: Text
    validation_errors: list[Text] = Field(max_length=100)
    attempts: int = Field(ge=1, le=MAX_ATTEMPTS)
    original_event_type: Name
    original_event_id: Name


# -- data held by services: erasure and retention, choreographed -------------------------------
# The audit projector decides (an operator asked for an erasure; the janitor found workflows
# past their lifetime) and publishes the request; every service's runtime removes what it
# holds in its own schema, in its own transaction, and confirms with data.removed. No
# service writes another's tables.

MAX_RETIRED_PER_EVENT = 500
"""Workflows per workflows.retired event (the janitor's batch)."""
MAX_ERASED_PER_EVENT = 2000
"""Workflow ids per subject.erasure_requested event; a subject with more is asked in parts."""


@event("subject.erasure_requested", 1)
class SubjectErasureRequested(EventModel):
    """Remove everything held about the subject (state of its workflows, their parked
    records and published outbox rows, archived copies); confirm with data.removed.

    The subject's workflows are those whose checkpoint here names the subject, and those
    the audit projection knows (``workflow_ids``): a service may hold rows of a workflow
    without a checkpoint of it (a fired timer, a redriven record). A subject with more
    workflows than one event carries is asked in ``parts`` events."""

    erasure_id: Name
    subject_hash: str = Field(
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="sha256 of the envelopes' subject_ref (UTF-8), hex, prefixed 'sha256:': the "
        "reference itself is not repeated, so the request keeps no copy of what it erases",
    )
    actor: Name
    requested_at: UtcDateTime
    workflow_ids: list[Name] = Field(default=[], max_length=MAX_ERASED_PER_EVENT)
    part: int = Field(default=1, ge=1, le=2**31 - 1)
    parts: int = Field(default=1, ge=1, le=2**31 - 1)


@event("workflows.retired", 1)
class WorkflowsRetired(EventModel):
    """These workflows passed their maximum lifetime: remove their rows (archive mode copies
    state and parked records to the service's own archive first); confirm with data.removed."""

    run_id: Name
    batch: int = Field(ge=1, le=2**31 - 1)
    mode: Literal["archive", "purge"]
    workflow_ids: list[Name] = Field(min_length=1, max_length=MAX_RETIRED_PER_EVENT)


@event("data.removed", 1)
class DataRemoved(EventModel):
    """One service's confirmation that it handled an erasure or retirement request."""

    request: Literal["erasure", "retirement"]
    request_id: Name = Field(
        description="erasure_id (erasure_id/part when asked in parts), or run_id/batch of a retirement"
    )
    service: Name
    workflows: int = Field(ge=0, le=2**31 - 1, description="workflows whose rows were touched")
    rows: dict[str, int] = Field(
        max_length=50, description="<schema>.<table> -> rows removed (archived first in archive mode)"
    )
