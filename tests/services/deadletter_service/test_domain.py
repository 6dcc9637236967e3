"""The dead-letter service's decisions: status transitions, filters, redrive bytes."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from chorus.contracts.platform import TimerCancel
from chorus.contracts.registry import default_registry
from chorus.kernel.codec import decode, encode
from chorus.platform.deadletter_service.domain import (
    DISCARDED,
    MAX_LIMIT,
    OPEN,
    REDRIVEN,
    FilterError,
    LetterFilter,
    Operation,
    TransitionRefusedError,
    age_s,
    parse_envelope,
    parse_filter,
    parse_json,
    redrive_refusal,
    redrive_value,
    resolve,
)
from tests.support.kafka import envelope

# -- status transitions -------------------------------------------------------------------


@pytest.mark.parametrize(("op", "to"), [("redrive", REDRIVEN), ("discard", DISCARDED)])
def test_an_open_letter_resolves_once(op: Operation, to: str) -> None:
    assert resolve(OPEN, op) == to


@pytest.mark.parametrize("status", [REDRIVEN, DISCARDED])
@pytest.mark.parametrize("op", ["redrive", "discard"])
def test_a_resolved_letter_refuses_every_operation(status: str, op: Operation) -> None:
    with pytest.raises(TransitionRefusedError) as refused:
        resolve(status, op)
    assert refused.value.status == status
    assert status in str(refused.value)


# -- filters ------------------------------------------------------------------------------


def test_no_parameters_is_every_letter_with_the_default_limit() -> None:
    assert parse_filter({}) == LetterFilter(limit=100)
    assert not parse_filter({}).narrows


def test_every_filter_parameter_is_parsed() -> None:
    f = parse_filter(
        {
            "service": "invoice_agent",
            "category": "persistent",
            "event_type": "invoice.received",
            "status": "open",
            "since": "2026-01-01T00:00:00Z",
            "until": "2026-01-02T00:00:00+01:00",
            "limit": "7",
        }
    )
    assert f == LetterFilter(
        service="invoice_agent",
        category="persistent",
        event_type="invoice.received",
        status="open",
        since=datetime(2026, 1, 1, tzinfo=timezone.utc),
        until=datetime(2026, 1, 1, 23, tzinfo=timezone.utc),
        limit=7,
    )
    assert f.narrows


def test_empty_values_mean_any() -> None:
    assert parse_filter({"service": "", "status": " ", "limit": ""}) == LetterFilter()


def test_a_json_filter_may_give_the_limit_as_a_number() -> None:
    assert parse_filter({"service": "a", "limit": 3}).limit == 3


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"catgory": "persistent"}, "catgory"),
        ({"category": "fatal"}, "category"),
        ({"status": "closed"}, "status"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-01-01T00:00:00"}, "until"),  # no offset
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "until"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"limit": str(MAX_LIMIT + 1)}, "limit"),
        ({"limit": True}, "limit"),
        ({"service": 5}, "service"),
    ],
)
def test_a_bad_filter_names_its_parameter(params: dict[str, object], parameter: str) -> None:
    with pytest.raises(FilterError) as bad:
        parse_filter(params)
    assert bad.value.parameter == parameter


def test_the_limit_cap_is_the_callers() -> None:
    assert parse_filter({"limit": "50"}, max_limit=50).limit == 50
    assert parse_filter({}, max_limit=20).limit == 20
    with pytest.raises(FilterError):
        parse_filter({"limit": "51"}, max_limit=50)


def test_allowed_parameters_are_the_callers() -> None:
    with pytest.raises(FilterError) as bad:
        parse_filter({"limit": "5"}, allowed=frozenset({"service"}))
    assert bad.value.parameter == "limit"


# -- redrive bytes ----------------------------------------------------------------------------


def test_an_envelope_is_redriven_with_the_next_attempt_and_nothing_else_changed() -> None:
    env = envelope(TimerCancel(timer_id="t-1", reason="no longer needed"))
    raw = encode(env)
    redriven = redrive_value(raw, attempts=3)
    assert redriven.attempt == 4
    before, after = json.loads(raw), json.loads(redriven.value)
    assert after.pop("attempt") == 4
    before.pop("attempt")
    assert after == before
    # Still a valid event of the registry, same id: the service's inbox recognises it.
    event = decode(redriven.value, default_registry())
    assert event.envelope.event_id == env.event_id
    assert event.envelope.attempt == 4


@pytest.mark.parametrize(
    ("service", "event_type"),
    [
        ("invoice_agent", "invoice.received"),  # a topic file's consumer
        ("payment_agent", "approval.decided"),
        ("payment_agent", "retry.due"),  # the runtime's topics: every runtime service reads them
    ],
)
def test_a_letter_goes_back_to_a_topic_its_service_reads(service: str, event_type: str) -> None:
    registry = default_registry()
    assert redrive_refusal(registry, service, registry.physical_topic(event_type)) is None


@pytest.mark.parametrize(
    ("service", "topic", "why"),
    [
        ("payment_agent", "chorus.timers", "payment_agent does not read chorus.timers"),
        ("invoice_agent", "research.sources", "invoice_agent does not read research.sources"),
        ("nobody", "procurement.events", "nobody does not read procurement.events"),
        ("invoice_agent", "__consumer_offsets", "'__consumer_offsets' is not a topic of the registry"),
    ],
)
def test_a_letter_naming_a_topic_its_service_does_not_read_is_refused(
    service: str, topic: str, why: str
) -> None:
    refusal = redrive_refusal(default_registry(), service, topic)
    assert refusal is not None and refusal.startswith(why)


def test_an_envelope_already_past_the_letters_attempts_still_moves_forward() -> None:
    raw = json.dumps({"event_id": str(uuid.uuid4()), "event_type": "a.b", "payload": {}, "attempt": 9})
    assert redrive_value(raw.encode(), attempts=2).attempt == 10


def test_an_envelope_without_an_integer_attempt_gets_one_past_the_letters() -> None:
    for attempt in (None, "3", True):
        body: dict[str, object] = {
            "event_id": "x",
            "event_type": "a.b",
            "payload": {},
            "attempt": attempt,
        }
        redriven = redrive_value(json.dumps(body).encode(), attempts=1)
        assert redriven.attempt == 2
        assert json.loads(redriven.value)["attempt"] == 2


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe not utf-8",
        b"not json at all",
        b"[1, 2, 3]",
        b"null",
        b'{"event_type": "a.b", "payload": {}}',  # no event id
        b'{"event_id": "x", "event_type": "a.b", "payload": "text"}',
        b"",
    ],
)
def test_bytes_that_are_not_an_envelope_are_redriven_unchanged(raw: bytes) -> None:
    redriven = redrive_value(raw, attempts=2)
    assert redriven.value == raw
    assert redriven.attempt is None
    assert parse_envelope(raw) is None


def test_json_null_is_told_apart_from_not_json() -> None:
    assert parse_json(b"null") == (None, True)
    assert parse_json(b"nul") == (None, False)


def test_age_is_never_negative() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert age_s(now, now - timedelta(minutes=2)) == 120.0
    assert age_s(now, now + timedelta(seconds=5)) == 0.0
