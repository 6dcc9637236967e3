"""The dead-letter service: what it keeps of each dead letter, the way a service's
runtime builds them (chorus.kernel.deadletters), so an operator can read, redrive or
discard it. Redrive bytes and status rules are tests/services/deadletter_service/test_domain.py's."""

from __future__ import annotations

import base64
import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from chorus.base.errors import PersistentError, TransientError
from chorus.contracts.approvals import ApprovalDecisionSubmitted
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.platform import ErrorCategory
from chorus.contracts.registry import default_registry
from chorus.kernel.codec import Event, decode, encode
from chorus.kernel.deadletters import dead_letter_envelope, failure
from chorus.kernel.records import Record
from chorus.platform.deadletter_service.adapters.repository import StoreLetter
from chorus.platform.deadletter_service.service import SPEC
from chorus.testing import WorkflowHarness, make_event

REGISTRY = default_registry()
GATE = ProducerRef(service="approval_gate", version="1.4.0")
FAILED_AT = datetime(2026, 1, 5, 8, 30, tzinfo=timezone.utc)
BINARY_HEADER = ("x-signature", b"\xff\x00\x10")


@pytest.fixture
def dlq() -> WorkflowHarness:
    return WorkflowHarness(SPEC)


def failed_event() -> Envelope:
    submitted = ApprovalDecisionSubmitted(
        approval_id="appr-1", decision="approve", reviewer="dana.manager", reviewer_tier="manager"
    )
    return make_event(submitted, workflow_id="wf-1", workflow_type="procurement").envelope


def record_of(value: bytes, key: bytes | None = b"wf-1") -> Record:
    return Record(
        "approvals.events",
        3,
        1207,
        key,
        value,
        (("event_type", b"x"), BINARY_HEADER),
        timestamp_ms=1_767_601_800_000,
    )


def letter(
    record: Record,
    parent: Envelope | None,
    error: Exception,
    category: ErrorCategory = "persistent",
    attempts: int = 1,
) -> Event[Any]:
    """The dead letter the approval gate's runtime publishes after ``attempts`` tries, as
    the dead-letter service reads it off chorus.deadletters."""
    failures = [
        failure(error, n, FAILED_AT + timedelta(minutes=n), retry_in_s=2.0**n if n < attempts else None)
        for n in range(1, attempts + 1)
    ]
    envelope = dead_letter_envelope(
        record, error, category, producer=GATE, consumer_group="approval_gate",
        now=FAILED_AT + timedelta(minutes=attempts), attempts=attempts, failures=failures, parent=parent,
    )  # fmt: skip
    return decode(encode(envelope), REGISTRY)


async def stored(dlq: WorkflowHarness, event: Event[Any]) -> StoreLetter:
    [row] = (await dlq.deliver(event)).outcome.effects
    assert isinstance(row, StoreLetter)
    return row


async def test_a_letter_keeps_the_record_exactly_as_it_was_read(dlq: WorkflowHarness) -> None:
    """What a redrive sends back: the same bytes, key and headers, to the same topic."""
    original = failed_event()
    record = record_of(encode(original))
    row = await stored(dlq, letter(record, original, PersistentError("no such approval")))
    assert (row.original_topic, row.original_partition, row.original_offset) == ("approvals.events", 3, 1207)
    assert (row.original_key, row.original_value) == (b"wf-1", record.value)
    assert row.original_timestamp_ms == record.timestamp_ms
    assert [(h["key"], base64.b64decode(h["value_b64"] or "")) for h in row.original_headers] == list(
        record.headers
    )


async def test_a_letter_says_which_release_failed_how_and_after_how_many_tries(dlq: WorkflowHarness) -> None:
    original = failed_event()
    dlq.clock.advance(45)  # read a little after it was written
    unreachable = TransientError("policy store unreachable")
    event = letter(record_of(encode(original)), original, unreachable, "transient", attempts=3)
    row = await stored(dlq, event)
    assert (row.service, row.service_version, row.consumer_group) == (
        "approval_gate",
        "1.4.0",
        "approval_gate",
    )
    assert (row.error_category, row.error_class, row.error_message) == (
        "transient",
        "TransientError",
        "policy store unreachable",
    )
    assert "TransientError: policy store unreachable" in row.error_traceback
    assert row.attempts == 3
    assert [(f["attempt"], f["retry_in_s"]) for f in row.failures] == [(1, 2.0), (2, 4.0), (3, None)]
    assert (row.original_event_type, row.original_event_id, row.original_workflow_id) == (
        "approval.decision_submitted",
        str(original.event_id),
        "wf-1",
    )
    assert row.dead_lettered_at == event.envelope.occurred_at
    assert row.received_at == dlq.clock.now()


async def test_a_letter_is_one_row_in_its_workflow_that_a_discard_can_answer(dlq: WorkflowHarness) -> None:
    """Keyed by the letter's own event id (a redelivered letter is the same row), with its
    envelope kept without the payload: a discard is published as its child, into the
    workflow that waits behind it."""
    original = failed_event()
    event = letter(record_of(encode(original)), original, PersistentError("no such approval"))
    row = await stored(dlq, event)
    assert row.id == event.envelope.event_id
    assert row == await stored(dlq, event)
    assert "payload" not in row.envelope
    parent = Envelope.model_validate({**row.envelope, "payload": {}})
    trace_id = original.traceparent[3:35]
    assert (parent.event_id, parent.workflow_id, parent.traceparent[3:35]) == (
        event.envelope.event_id,
        "wf-1",
        trace_id,
    )


async def test_a_poison_record_is_kept_with_its_bytes_and_no_event_to_name(dlq: WorkflowHarness) -> None:
    record = record_of(b"\xff\xfe{not json", key=None)
    row = await stored(dlq, letter(record, None, ValueError("not JSON"), "decode"))
    assert (row.original_key, row.original_value) == (None, b"\xff\xfe{not json")
    assert (row.original_event_type, row.original_event_id, row.original_workflow_id) == (None, None, None)
    assert (row.error_category, row.error_class) == ("decode", "ValueError")
    assert row.envelope["workflow_id"] == "poison:approvals.events:3:1207"


@pytest.mark.parametrize(
    ("field", "pointer"),
    [
        ("value_b64", "/payload/original/value_b64"),
        ("key_b64", "/payload/original/key_b64"),
        ("header", "/payload/original/headers/1/value_b64"),
    ],
)
async def test_a_letter_whose_bytes_are_not_base64_is_refused_naming_the_field(
    dlq: WorkflowHarness, field: str, pointer: str
) -> None:
    """Refused as persistent: the letter is dead-lettered itself, with its own bytes."""
    original = failed_event()
    event = letter(record_of(encode(original)), original, PersistentError("no such approval"))
    kept = event.payload.original
    garbled = "not base64!"
    if field == "header":
        headers = [kept.headers[0], kept.headers[1].model_copy(update={"value_b64": garbled})]
        broken = kept.model_copy(update={"headers": headers})
    else:
        broken = kept.model_copy(update={field: garbled})
    bad = dataclasses.replace(event, payload=event.payload.model_copy(update={"original": broken}))
    with pytest.raises(PersistentError, match=pointer):
        await dlq.deliver(bad)
