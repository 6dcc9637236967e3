"""Turning an envelope into an outbox row: topic from the registry, key = workflow id."""

from __future__ import annotations

from chorus.codec import encode
from chorus.registry import Registry
from chorus.store import OutboxMessage
from chorus_contracts.envelope import Envelope


def outbox_message(registry: Registry, envelope: Envelope) -> OutboxMessage:
    """The row that publishes ``envelope`` on its event type's topic, in its priority lane.

    Headers repeat the trace context and type so header-only tools can route and trace.
    """
    return OutboxMessage(
        topic=registry.physical_topic(envelope.event_type, envelope.priority),
        key=envelope.workflow_id.encode(),
        value=encode(envelope),
        headers=envelope_headers(envelope),
        event_id=envelope.event_id,
        workflow_id=envelope.workflow_id,
    )


def envelope_headers(envelope: Envelope) -> list[tuple[str, bytes]]:
    """The Kafka headers every Chorus producer sets."""
    return [
        ("traceparent", envelope.traceparent.encode()),
        ("event_type", envelope.event_type.encode()),
        ("schema_version", str(envelope.schema_version).encode()),
    ]
