"""Turning an envelope into an outbox row: topic from the registry, key = workflow id.

Handlers never write the outbox themselves (the runtime commits their Outcome). Code that
publishes outside a handler (an HTTP API, a background loop) writes through
:class:`OutboxWriter`: every row gets the same headers, and the relay is woken once the
transaction has committed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from chorus.base.errors import EventTooLargeError, SigningConfigError
from chorus.contracts.envelope import Envelope
from chorus.contracts.platform import SIGNATURE_HEADER, FireTarget
from chorus.contracts.registry import Registry
from chorus.contracts.strictjson import escape
from chorus.kernel.codec import encode
from chorus.kernel.ports import Sealing, Signer
from chorus.kernel.store import OutboxMessage
from chorus.kernel.store.postgres import ServiceStore


def outbox_message(registry: Registry, envelope: Envelope, signer: Signer | None = None) -> OutboxMessage:
    """The row that publishes ``envelope`` on its event type's topic, in its priority lane.

    Headers repeat the trace context and type so header-only tools can route and trace;
    an event type the registry marks ``signed_by`` gets ``signer``'s signature (which must
    be one of its signers': anything else is a bug, refused here rather than by every consumer).
    Raises :class:`EventTooLargeError` (naming the largest field) when the record would be
    larger than its topic takes: refused here, at the source, rather than by the broker
    after it was committed.
    """
    value = encode(envelope)
    headers = envelope_headers(envelope)
    signature = signature_header(registry, envelope.event_type, value, signer)
    if signature is not None:
        headers.append(signature)
    message = OutboxMessage(
        topic=registry.physical_topic(envelope.event_type, envelope.priority),
        key=envelope.workflow_id.encode(),
        value=value,
        headers=headers,
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


def signature_header(
    registry: Registry, event_type: str, value: bytes, signer: Signer | None
) -> tuple[str, bytes] | None:
    """``signer``'s signature header for a record of a signed ``event_type`` (None for a
    type the registry does not sign); :class:`SigningConfigError` when ``signer`` is not
    one of its signers (a bug, refused here rather than by every consumer)."""
    signed_by = registry.signers_of(event_type)
    if not signed_by:
        return None
    if signer is None or signer.service not in signed_by:
        if event_type in registry.own_commands():
            return None  # a service of no registry's (a test's): its consumer trusts it for itself only
        raise SigningConfigError(
            f"{event_type} is signed by {', '.join(sorted(signed_by))}; "
            f"{signer.service if signer else 'this code'} cannot publish it"
        )
    return signer.header(value)


def fire_target(registry: Registry, fired: Envelope, signer: Signer | None) -> FireTarget:
    """What a timer publishes when it falls due: ``fired`` on its topic, verbatim, with its
    producer's signature when its type is signed. The timer service relays the signature
    and never signs (so it can fire a decision its scheduler made, but never make one);
    ``fired.occurred_at`` is the time it is due (the scheduler states it, and signs it)."""
    value = fired.model_dump(mode="json")
    # Encoded only to be signed: a retry, the most frequent timer, fires an unsigned type.
    signed = registry.signers_of(fired.event_type)
    header = signature_header(registry, fired.event_type, encode(fired), signer) if signed else None
    return FireTarget(
        topic=registry.physical_topic(fired.event_type, fired.priority),
        key=fired.workflow_id,
        value=value,
        signature=header[1].decode() if header else None,
    )


def envelope_headers(envelope: Envelope) -> list[tuple[str, bytes]]:
    """The Kafka headers every Chorus producer sets."""
    return _headers(envelope.traceparent, envelope.event_type, envelope.schema_version)


def _headers(traceparent: object, event_type: object, schema_version: object) -> list[tuple[str, bytes]]:
    return [
        ("traceparent", str(traceparent).encode()),
        ("event_type", str(event_type).encode()),
        ("schema_version", str(schema_version).encode()),
    ]


def stored_envelope_message(
    topic: str, key: str, envelope: dict[str, Any], signature: str | None = None
) -> OutboxMessage:
    """The row for an envelope kept as JSON (a timer's target), published verbatim, with
    the same headers as every other event and the signature its producer made of it."""
    event_id = envelope.get("event_id")
    try:
        parsed_id: uuid.UUID | None = uuid.UUID(str(event_id))
    except ValueError:
        parsed_id = None
    return OutboxMessage(
        topic=topic,
        key=key.encode(),
        value=json.dumps(envelope).encode(),
        headers=[
            *_headers(
                envelope.get("traceparent", ""),
                envelope.get("event_type", ""),
                envelope.get("schema_version", ""),
            ),
            *([(SIGNATURE_HEADER, signature.encode())] if signature else []),
        ],
        event_id=parsed_id,
        workflow_id=str(envelope.get("workflow_id", key)),
    )


@dataclass
class OutboxTransaction:
    """One transaction of code outside handlers: its own writes on ``conn``, and the events
    to publish, which commit with them."""

    conn: asyncpg.Connection
    registry: Registry
    signer: Signer | None = None
    sealer: Sealing | None = None
    messages: list[OutboxMessage] = field(default_factory=list)

    async def publish(self, *envelopes: Envelope) -> None:
        """Publish ``envelopes`` on their topics, their personal data sealed
        (EventTooLargeError when one cannot be published)."""
        for envelope in envelopes:
            sealed = await self.sealer.seal(envelope) if self.sealer is not None else envelope
            self.messages.append(outbox_message(self.registry, sealed, self.signer))

    def publish_messages(self, messages: Sequence[OutboxMessage]) -> None:
        """Publish rows built already: a record redriven byte for byte, a stored envelope."""
        self.messages.extend(messages)


@dataclass(frozen=True)
class OutboxWriter:
    store: ServiceStore
    registry: Registry
    wake_relay: Callable[[], None]
    signer: Signer | None = None
    """Signs the decision events this service produces (chorus.privacy.signing)."""
    sealer: Sealing | None = None
    """Seals personal data (chorus.privacy.crypto); None only where no event carries any."""

    @asynccontextmanager
    async def transaction(self, conn: asyncpg.Connection) -> AsyncIterator[OutboxTransaction]:
        """A transaction on ``conn`` whose published events commit with it; the relay is
        woken after the commit (never before: it would find nothing)."""
        tx = OutboxTransaction(conn, self.registry, self.signer, self.sealer)
        async with conn.transaction():
            yield tx
            await self.store.add_outbox(conn, tx.messages)
        if tx.messages:
            self.wake_relay()


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
