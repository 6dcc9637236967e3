"""The handlers: ``event.dead_lettered`` stores the letter in the same transaction as the
event's inbox row, so each dead letter is stored exactly once; ``workflow.redrive_requested``
(an operator's, stated by the gateway) stores the request the same way, for the redrive
worker (chorus.platform.deadletter_service.operations)."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

from chorus.base.errors import PersistentError
from chorus.contracts.envelope import Envelope
from chorus.contracts.platform import EventDeadLettered, RedriveRequested, bulk_reason
from chorus.kernel.codec import Event
from chorus.kernel.service import Context, Outcome
from chorus.platform.deadletter_service.adapters.repository import AskRedrive, StoreLetter


async def on_event_dead_lettered(
    event: Event[EventDeadLettered], state: None, ctx: Context[Any]
) -> Outcome[Any]:
    """Store the letter as ``open``. Malformed base64 is a persistent error: the
    letter itself is then dead-lettered, with its own bytes, and stored as such."""
    return Outcome(effects=[letter_row(event.envelope, event.payload, ctx.clock.now())])


async def on_redrive_requested(
    event: Event[RedriveRequested], state: None, ctx: Context[Any]
) -> Outcome[Any]:
    """Keep the operator's request; its letters are redriven by the worker, as them."""
    asked = event.payload
    reason = bulk_reason(asked.reason, asked.bulk_id)
    envelope = event.envelope
    request = AskRedrive(envelope.event_id, envelope.workflow_id, asked.requested_by, reason, ctx.clock.now())
    return Outcome(effects=[request])


def letter_row(envelope: Envelope, letter: EventDeadLettered, received_at: datetime) -> StoreLetter:
    original = letter.original
    return StoreLetter(
        id=envelope.event_id,
        dead_lettered_at=envelope.occurred_at,
        received_at=received_at,
        service=letter.service,
        service_version=letter.service_version,
        consumer_group=letter.consumer_group,
        original_topic=original.topic,
        original_partition=original.partition,
        original_offset=original.offset,
        original_key=_bytes("/payload/original/key_b64", original.key_b64),
        original_value=_bytes("/payload/original/value_b64", original.value_b64) or b"",
        original_headers=[
            {
                "key": h.key,
                "value_b64": _canonical(f"/payload/original/headers/{i}/value_b64", h.value_b64),
            }
            for i, h in enumerate(original.headers)
        ],
        original_timestamp_ms=original.timestamp_ms,
        error_category=letter.error.category,
        error_class=letter.error.error_class,
        error_message=letter.error.message,
        error_traceback=letter.error.traceback,
        error_pointer=letter.error.pointer,
        attempts=letter.attempts,
        failures=[f.model_dump(mode="json") for f in letter.failures],
        original_event_type=letter.original_event_type,
        original_event_id=letter.original_event_id,
        original_workflow_id=letter.original_workflow_id,
        # The letter's own envelope (without the payload stored above in columns):
        # a discard is published as its child, in its workflow.
        envelope=envelope.model_dump(mode="json", exclude={"payload"}),
    )


def _bytes(pointer: str, value_b64: str | None) -> bytes | None:
    if value_b64 is None:
        return None
    try:
        return base64.b64decode(value_b64, validate=True)
    except binascii.Error as exc:
        raise PersistentError(f"{pointer} is not base64: {exc}") from None


def _canonical(pointer: str, value_b64: str | None) -> str | None:
    decoded = _bytes(pointer, value_b64)
    return base64.b64encode(decoded).decode() if decoded is not None else None
