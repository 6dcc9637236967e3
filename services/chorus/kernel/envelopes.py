"""Building envelopes for outgoing events.

Event ids of emitted events are derived from the cause (uuid5 of the parent's
event id, the emitting service and the position), so a handler that runs twice
for one input emits the same ids twice and every consumer's inbox drops the copy.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from chorus.base.tracing import child_traceparent
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope, Priority, ProducerRef

_NAMESPACE = uuid.UUID("6b1e0c1e-5a55-4c59-9d0c-63686f727573")


def derived_event_id(parent_event_id: uuid.UUID, service: str, position: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{parent_event_id}/{service}/{position}")


def child_envelope(
    parent: Envelope,
    event: EventModel,
    *,
    producer: ProducerRef,
    now: datetime,
    position: str,
    traceparent: str | None = None,
    workflow_id: str | None = None,
    workflow_type: str | None = None,
    priority: Priority | None = None,
    idempotency_key: str | None = None,
    deadline: datetime | None = None,
    subject_ref: str | None = None,
    attempt: int = 1,
) -> Envelope:
    """The envelope of an event caused by ``parent``: same workflow, trace and priority."""
    event_id = derived_event_id(parent.event_id, producer.service, position)
    return Envelope(
        event_id=event_id,
        event_type=event.event_type,
        schema_version=event.version,
        occurred_at=now,
        workflow_id=workflow_id or parent.workflow_id,
        workflow_type=workflow_type or parent.workflow_type,
        correlation_id=parent.correlation_id,
        causation_id=str(parent.event_id),
        idempotency_key=idempotency_key or str(event_id),
        traceparent=traceparent or child_traceparent(parent.traceparent),
        priority=priority or parent.priority,
        attempt=attempt,
        deadline=deadline if deadline is not None else parent.deadline,
        producer=producer,
        subject_ref=subject_ref if subject_ref is not None else parent.subject_ref,
        pins=parent.pins,
        payload=event.model_dump(mode="json"),
    )


def start_envelope(
    event: EventModel,
    *,
    workflow_id: str,
    workflow_type: str,
    producer: ProducerRef,
    now: datetime,
    idempotency_key: str,
    event_id: uuid.UUID | None = None,
    priority: Priority = "normal",
    traceparent: str | None = None,
    deadline: datetime | None = None,
    subject_ref: str | None = None,
    correlation_id: str | None = None,
    pins: dict[str, str] | None = None,
) -> Envelope:
    """The first event of a workflow (from the gateway, the CLI or a test); ``pins`` are
    the releases it is pinned to (chorus.rollouts), carried by every event it causes."""
    return Envelope(
        event_id=event_id or uuid.uuid4(),
        event_type=event.event_type,
        schema_version=event.version,
        occurred_at=now,
        workflow_id=workflow_id,
        workflow_type=workflow_type,
        correlation_id=correlation_id or workflow_id,
        causation_id=None,
        idempotency_key=idempotency_key,
        traceparent=traceparent or child_traceparent(None),
        priority=priority,
        attempt=1,
        deadline=deadline,
        producer=producer,
        subject_ref=subject_ref,
        pins=pins or None,
        payload=event.model_dump(mode="json"),
    )


def system_envelope(
    event: EventModel,
    *,
    producer: ProducerRef,
    now: datetime,
    event_id: uuid.UUID,
    workflow_id: str,
    workflow_type: str = "unknown",
    traceparent: str | None = None,
) -> Envelope:
    """An envelope for a runtime event that has no decodable cause (a poison record)."""
    return start_envelope(
        event,
        workflow_id=workflow_id,
        workflow_type=workflow_type,
        producer=producer,
        now=now,
        idempotency_key=str(event_id),
        event_id=event_id,
        traceparent=child_traceparent(traceparent),
    )
