"""Fuzzing the Kafka edge: whatever a record's bytes are, decode() returns a typed event
that can be stored and encoded again, or raises a DecodeError. Never anything else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from chorus.base.errors import DecodeError
from chorus.contracts.base import EventModel
from chorus.contracts.registry import default_registry
from chorus.contracts.strictjson import unstorable
from chorus.kernel.codec import Event, decode, encode
from tests.support.hostile import _paths, hostile_numbers, hostile_strings, json_trees, nested, replace_at

REGISTRY = default_registry()
EXAMPLES = [example.body for examples in REGISTRY.examples.values() for example in examples]


def decodes_safely(raw: bytes) -> Event[EventModel] | DecodeError:
    """The property under test: a typed event or a DecodeError (anything else fails the test)."""
    try:
        event = decode(raw, REGISTRY)
    except DecodeError as exc:
        assert str(exc)  # says what is wrong
        return exc
    # What decodes can be stored (jsonb, text) and published again.
    assert unstorable(event.envelope.model_dump(mode="json")) is None
    assert unstorable(event.payload.model_dump(mode="json")) is None
    json.loads(encode(event.envelope))
    return event


@given(st.binary(max_size=4000))
def test_arbitrary_bytes(raw: bytes) -> None:
    decodes_safely(raw)


@given(json_trees())
def test_arbitrary_json_trees(tree: Any) -> None:
    decodes_safely(json.dumps(tree, allow_nan=True).encode("utf-8", "surrogatepass"))


hostile_values: st.SearchStrategy[Any] = st.one_of(
    hostile_strings(),
    hostile_numbers(),
    json_trees(max_leaves=10),
    st.builds(nested, st.integers(min_value=30, max_value=200)),
    st.sampled_from([None, True, [], {}, "x" * 25_000]),
)


@given(st.data())
def test_valid_events_with_one_field_made_hostile(data: st.DataObject) -> None:
    body = data.draw(st.sampled_from(EXAMPLES), label="example")
    path = data.draw(st.sampled_from([p for p in _paths(body) if p]), label="field")
    value = data.draw(hostile_values, label="value")
    text = json.dumps(replace_at(body, path, value), allow_nan=True, ensure_ascii=data.draw(st.booleans()))
    decodes_safely(text.encode("utf-8", "surrogatepass"))


@given(st.sampled_from(EXAMPLES), st.sampled_from(["event_id", "payload", "schema_version"]))
def test_a_duplicated_member_is_refused(body: dict[str, Any], key: str) -> None:
    text = json.dumps(body)
    smuggled = text.replace(f'"{key}"', f'"{key}": null, "{key}"', 1)
    assert isinstance(decodes_safely(smuggled.encode()), DecodeError)


def test_every_example_still_decodes() -> None:
    for body in EXAMPLES:
        assert isinstance(decodes_safely(json.dumps(body).encode()), Event)
