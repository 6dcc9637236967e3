"""Turning an envelope into an outbox row: topic from the registry, key = workflow id."""

from __future__ import annotations

from typing import Any

from chorus.codec import encode
from chorus.errors import EventTooLargeError
from chorus.registry import Registry
from chorus.store import OutboxMessage
from chorus.strictjson import escape
from chorus_contracts.envelope import Envelope


def outbox_message(registry: Registry, envelope: Envelope) -> OutboxMessage:
    """The row that publishes ``envelope`` on its event type's topic, in its priority lane.

    Headers repeat the trace context and type so header-only tools can route and trace.
    Raises :class:`EventTooLargeError` (naming the largest field) when the record would be
    larger than its topic takes: refused here, at the source, rather than by the broker
    after it was committed.
    """
    message = OutboxMessage(
        topic=registry.physical_topic(envelope.event_type, envelope.priority),
        key=envelope.workflow_id.encode(),
        value=encode(envelope),
        headers=envelope_headers(envelope),
        event_id=envelope.event_id,
        workflow_id=envelope.workflow_id,
    )
    limit = registry.publish_limit(message.topic)
    if message.size > limit:
        found = largest_text(envelope.payload, "/payload")
        where = f"; its largest field is {found[0]} ({found[1]:,} bytes)" if found else ""
        raise EventTooLargeError(
            f"{envelope.event_type} would be {message.size:,} bytes, more than the {limit:,} "
            f"{message.topic} takes{where}",
            size=message.size,
            limit=limit,
            pointer=found[0] if found else None,
        )
    return message


def envelope_headers(envelope: Envelope) -> list[tuple[str, bytes]]:
    """The Kafka headers every Chorus producer sets."""
    return [
        ("traceparent", envelope.traceparent.encode()),
        ("event_type", envelope.event_type.encode()),
        ("schema_version", str(envelope.schema_version).encode()),
    ]


def largest_text(value: Any, pointer: str = "") -> tuple[str, int] | None:
    """The JSON pointer and UTF-8 size of the largest string in ``value``, if it has any."""
    best: tuple[str, int] | None = None
    stack: list[tuple[str, Any]] = [(pointer, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            size = len(item.encode("utf-8", "surrogatepass"))
            if best is None or size > best[1]:
                best = (where, size)
        elif isinstance(item, dict):
            stack.extend((f"{where}/{escape(str(k))}", v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{where}/{i}", v) for i, v in enumerate(item))
    return best
