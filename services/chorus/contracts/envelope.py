"""The envelope every Chorus event travels in (itself versioned: envelope v1).

The Kafka message key is always ``workflow_id`` so that one workflow's events
stay in one partition, in order.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from chorus.contracts.base import Model, Name, UtcDateTime, Uuid

ENVELOPE_VERSION: Literal[1] = 1
Priority = Literal["high", "normal", "low"]
EVENT_TYPE_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"
TRACEPARENT_PATTERN = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
RELEASE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
Release = Annotated[str, Field(pattern=RELEASE_PATTERN, description="a release label of a service")]
"""A deployment's release label (``CHORUS_RELEASE``, or the service's version)."""
MAX_PINS = 100
MAX_ATTEMPTS = 1_000_000
"""Far above any retry policy; within what every store of an attempt count holds."""


class ProducerRef(Model):
    service: Name
    version: Name


class Envelope(Model):
    """Metadata common to every event; ``payload`` is validated against the event's own schema."""

    model_config = Model.model_config | {"title": "envelope_v1"}

    envelope_version: Literal[1] = ENVELOPE_VERSION
    event_id: Uuid
    event_type: str = Field(pattern=EVENT_TYPE_PATTERN)
    schema_version: int = Field(ge=1)
    occurred_at: UtcDateTime
    workflow_id: Name
    workflow_type: Name
    correlation_id: Name
    causation_id: str | None = None
    idempotency_key: Name
    traceparent: str = Field(pattern=TRACEPARENT_PATTERN, description="W3C trace context")
    priority: Priority = "normal"
    attempt: int = Field(default=1, ge=1, le=MAX_ATTEMPTS)
    deadline: UtcDateTime | None = None
    producer: ProducerRef
    subject_ref: str | None = Field(
        default=None,
        description="reference to the data subject for erasure; never personal data itself",
    )
    pins: Annotated[dict[Name, Release], Field(max_length=MAX_PINS)] | None = Field(
        default=None,
        description="service -> the release that handles this workflow there (versioned "
        "rollouts): set when the workflow starts, carried by every event it causes",
    )
    payload: dict[str, Any]
