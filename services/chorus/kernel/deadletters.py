"""The ``event.dead_lettered`` envelope: one builder for every producer of dead letters.

A dead letter carries the record's original bytes, topic, partition, offset and
headers, the error (class, category, message, traceback, JSON pointer), the
attempt count and every failure. With a decoded parent it is the parent's child
(same workflow, trace, priority; id derived from the parent's event id). Without
one (bytes that did not decode) its id is derived from topic, partition and
offset and its workflow is ``poison:<topic>:<partition>:<offset>``, so the same
poison record dead-lettered twice carries one event id both times.
"""

from __future__ import annotations

import hashlib
import traceback
import uuid
from collections.abc import Sequence
from datetime import datetime

from chorus.base.logs import scrub
from chorus.contracts import strictjson
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.platform import ErrorCategory, ErrorDetail, EventDeadLettered, Failure
from chorus.contracts.strictjson import storable
from chorus.kernel.envelopes import child_envelope, derived_event_id, system_envelope
from chorus.kernel.records import Record, to_original

MAX_TRACEBACK_CHARS = 8000
MAX_MESSAGE_CHARS = 2000
MAX_POINTER_CHARS = 500
MAX_ORIGINAL_BYTES = 4 * 1024 * 1024
"""Larger originals are referenced, not repeated: only a dead letter that failed again
can be this large, and wrapping it once more must not outgrow the dead-letter topic."""


def error_message(error: BaseException) -> str:
    """The error's message, bounded and storable: it may quote hostile input (a NUL in a
    field name, say), and every consumer of the dead letter stores it in PostgreSQL. It may
    quote personal data too (a handler's error naming a value it read): the values opened
    for this event are blanked, as in log lines (chorus.base.logs.scrub)."""
    return storable(scrub(str(error) or type(error).__name__))[:MAX_MESSAGE_CHARS]


def failure(error: BaseException, attempt: int, now: datetime, retry_in_s: float | None = None) -> Failure:
    return Failure(
        at=now,
        attempt=attempt,
        error_class=type(error).__name__,
        message=error_message(error),
        retry_in_s=retry_in_s,
    )


def _pointer(error: BaseException) -> str | None:
    pointer = getattr(error, "pointer", None)
    return storable(pointer)[:MAX_POINTER_CHARS] if isinstance(pointer, str) else None


def dead_letter_envelope(
    record: Record,
    error: BaseException,
    category: ErrorCategory,
    *,
    producer: ProducerRef,
    consumer_group: str,
    now: datetime,
    attempts: int,
    failures: Sequence[Failure],
    parent: Envelope | None,
    traceparent: str | None = None,
    outbox_row: str | None = None,
    omit_value: bool = False,
) -> Envelope:
    """``outbox_row`` marks a record that was never published (the broker refused it from
    that outbox row); its identity is then the row, not a topic position."""
    original = to_original(record)
    value = record.value or b""
    if omit_value or len(value) > MAX_ORIGINAL_BYTES:
        original = original.model_copy(
            update={
                "value_b64": "",
                "value_omitted": True,
                "value_size": len(value),
                "value_sha256": hashlib.sha256(value).hexdigest(),
            }
        )
    if outbox_row is not None:
        original = original.model_copy(update={"outbox_row": outbox_row})
    body = EventDeadLettered(
        service=producer.service,
        service_version=producer.version,
        consumer_group=consumer_group,
        original=original,
        error=ErrorDetail(
            category=category,
            error_class=type(error).__name__,
            message=error_message(error),
            traceback=storable(scrub("".join(traceback.format_exception(error))))[-MAX_TRACEBACK_CHARS:],
            pointer=_pointer(error),
        ),
        attempts=attempts,
        failures=list(failures),
        original_event_type=parent.event_type if parent else None,
        original_event_id=str(parent.event_id) if parent else None,
        original_workflow_id=parent.workflow_id if parent else None,
    )
    if parent is not None:
        return child_envelope(
            parent,
            body,
            producer=producer,
            now=now,
            position=f"dead-letter/{attempts}" if outbox_row is None else f"refused/{outbox_row}",
            traceparent=traceparent,
        )
    header_traceparent = dict(record.headers).get("traceparent")
    where = outbox_row or f"{record.topic}:{record.partition}:{record.offset}"
    return system_envelope(
        body,
        producer=producer,
        now=now,
        event_id=derived_event_id(uuid.uuid5(uuid.NAMESPACE_URL, where), producer.service, "poison"),
        workflow_id=f"poison:{where}",
        traceparent=header_traceparent.decode("latin-1") if header_traceparent else None,
    )


def refused_row_dead_letter(
    record: Record,
    error: BaseException,
    *,
    producer: ProducerRef,
    outbox_row: str,
    now: datetime,
    omit_value: bool = False,
) -> Envelope:
    """The dead letter of an outbox row the broker refused. ``record`` holds the row's topic,
    key, value and headers (partition and offset 0: it never had a position). When the row's
    value is an envelope, the dead letter joins that event's workflow and trace."""
    parent: Envelope | None
    try:
        parent = Envelope.model_validate(strictjson.loads(record.value or b""))
    except (strictjson.StrictJSONError, ValueError):
        parent = None
    return dead_letter_envelope(
        record,
        error,
        "persistent",
        producer=producer,
        consumer_group=f"{producer.service}-relay",
        now=now,
        attempts=1,
        failures=[failure(error, 1, now)],
        parent=parent,
        outbox_row=outbox_row,
        omit_value=omit_value,
    )
