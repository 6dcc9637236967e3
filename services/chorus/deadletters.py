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

from chorus.envelopes import child_envelope, derived_event_id, system_envelope
from chorus.runtime.records import Record, to_original
from chorus_contracts.envelope import Envelope, ProducerRef
from chorus_contracts.platform import ErrorCategory, ErrorDetail, EventDeadLettered, Failure

MAX_TRACEBACK_CHARS = 8000
MAX_MESSAGE_CHARS = 2000
MAX_ORIGINAL_BYTES = 4 * 1024 * 1024
"""Larger originals are referenced, not repeated: only a dead letter that failed again
can be this large, and wrapping it once more must not outgrow the dead-letter topic."""


def failure(error: BaseException, attempt: int, now: datetime, retry_in_s: float | None = None) -> Failure:
    return Failure(
        at=now,
        attempt=attempt,
        error_class=type(error).__name__,
        message=(str(error) or type(error).__name__)[:MAX_MESSAGE_CHARS],
        retry_in_s=retry_in_s,
    )


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
) -> Envelope:
    original = to_original(record)
    value = record.value or b""
    if len(value) > MAX_ORIGINAL_BYTES:
        original = original.model_copy(
            update={
                "value_b64": "",
                "value_omitted": True,
                "value_size": len(value),
                "value_sha256": hashlib.sha256(value).hexdigest(),
            }
        )
    body = EventDeadLettered(
        service=producer.service,
        service_version=producer.version,
        consumer_group=consumer_group,
        original=original,
        error=ErrorDetail(
            category=category,
            error_class=type(error).__name__,
            message=(str(error) or type(error).__name__)[:MAX_MESSAGE_CHARS],
            traceback="".join(traceback.format_exception(error))[-MAX_TRACEBACK_CHARS:],
            pointer=getattr(error, "pointer", None),
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
            position=f"dead-letter/{attempts}",
            traceparent=traceparent,
        )
    header_traceparent = dict(record.headers).get("traceparent")
    where = f"{record.topic}:{record.partition}:{record.offset}"
    return system_envelope(
        body,
        producer=producer,
        now=now,
        event_id=derived_event_id(uuid.uuid5(uuid.NAMESPACE_URL, where), producer.service, "poison"),
        workflow_id=f"poison:{where}",
        traceparent=header_traceparent.decode("latin-1") if header_traceparent else None,
    )
