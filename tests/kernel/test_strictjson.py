"""The strict JSON reader: every hostile text is a StrictJSONError naming the problem, and
whatever it accepts can be stored in PostgreSQL and encoded again."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chorus.contracts import strictjson
from chorus.contracts.strictjson import (
    MAX_DEPTH,
    MAX_SAFE_INTEGER,
    StrictJSONError,
    loads,
    storable,
    unstorable,
)
from tests.support.hostile import hostile_strings, json_trees


@pytest.mark.parametrize(
    ("raw", "message", "pointer"),
    [
        (b'{"a": "x\\u0000y"}', "contains a NUL character at character 1", "/a"),
        (b'{"a": ["ok", "\\ud800"]}', "unpaired surrogate U+D800", "/a/1"),
        (b'{"a\\u0000b": 1}', "the member name contains a NUL", "/a\\u0000b"),
        (b'{"a": "\xed\xa0\x80"}', "not UTF-8: byte 7", None),
        ('{"a": 1}'.encode("utf-16"), "not UTF-8: byte 0", None),
        (b'{"a": NaN}', "NaN is not JSON", None),
        (b'{"a": -Infinity}', "-Infinity is not JSON", None),
        (b'{"a": 1e999}', "out of range", None),
        (b'{"a": 9007199254740992}', "outside", None),
        (b'{"a": -9007199254740992}', "outside", None),
        (b'{"a": ' + b"9" * 5000 + b"}", "not JSON Chorus reads", None),
        (b'{"a": 1, "a": 2}', "duplicate member name 'a'", None),
        (b"[" * 100_000, f"nested deeper than {MAX_DEPTH} levels", None),
        (b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1), "nested deeper", None),
        (b'{"a": tru}', "not JSON", None),
        # Unterminated quotes with many brackets: linear, not a rescan per quote (minutes).
        (b'"' + b'\\"' * 300_000 + b"[" * 70, "not JSON", None),
        (b'"' * 300_000 + b"[" * 70, "nested deeper", None),
        (b"\xef\xbb\xbf{}", "not JSON", None),
    ],
)
def test_hostile_text_is_refused_with_a_reason(raw: bytes, message: str, pointer: str | None) -> None:
    with pytest.raises(StrictJSONError, match=None) as caught:
        loads(raw)
    assert message in str(caught.value)
    assert caught.value.pointer == pointer


def test_what_is_within_the_rules_reads_as_json_would() -> None:
    text = '{"a": [1, 2.5, "Grüße, 東京 🚀 שלום", null, true], "n": 9007199254740991, "deep": [[[["x"]]]]}'
    assert loads(text.encode()) == json.loads(text)


def test_depth_counts_brackets_outside_strings_only() -> None:
    inside = "[" * 10_000
    assert loads(json.dumps({"text": inside}).encode()) == {"text": inside}
    exactly = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads(exactly) == json.loads(exactly)


def test_an_integral_number_is_an_integer_however_it_is_spelled() -> None:
    assert loads(b'{"a": 387.0, "b": 1e3, "c": 2.5}') == {"a": 387, "b": 1000, "c": 2.5}
    assert isinstance(loads(b"[387.0]")[0], int)


def test_storable_spells_what_postgresql_cannot_hold() -> None:
    assert storable("a\x00b\ud800") == "a\\u0000b\\ud800"
    assert storable("Grüße 東京") == "Grüße 東京"
    assert unstorable({"ok": ["fine", {"bad": "x\x00"}]}) == (
        "/ok/1/bad",
        "/ok/1/bad: contains a NUL character at character 1, which cannot be stored",
    )


# -- properties ------------------------------------------------------------------------------


def _check_accepted(value: Any) -> None:
    """What loads() returns: storable strings, finite numbers in range, re-encodable."""
    assert unstorable(value) is None
    json.dumps(value, allow_nan=False)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            assert abs(item) <= MAX_SAFE_INTEGER
        elif isinstance(item, float):
            assert math.isfinite(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


@given(st.binary(max_size=2000))
def test_any_bytes_give_a_value_or_a_strict_json_error(raw: bytes) -> None:
    try:
        value = loads(raw)
    except StrictJSONError:
        return
    _check_accepted(value)


@given(json_trees(), st.booleans())
def test_any_json_tree_with_hostile_leaves_is_read_or_refused(tree: Any, ascii_only: bool) -> None:
    text = json.dumps(tree, ensure_ascii=ascii_only, allow_nan=True)
    try:
        raw = text.encode("utf-8", "surrogatepass")
        value = loads(raw)
    except StrictJSONError:
        return
    _check_accepted(value)


@given(hostile_strings())
def test_a_hostile_string_is_read_exactly_or_refused_naming_it(text: str) -> None:
    raw = json.dumps({"field": text}).encode()
    try:
        value = loads(raw)
    except StrictJSONError as exc:
        assert exc.pointer in (None, "/field")
        return
    assert value == json.loads(raw)  # the text JSON means (an escaped surrogate pair is one character)


@given(st.text(max_size=30), st.integers(min_value=2, max_value=5))
def test_duplicate_member_names_are_always_refused(key: str, copies: int) -> None:
    members = ", ".join(f"{json.dumps(key)}: {n}" for n in range(copies))
    with pytest.raises(StrictJSONError):
        strictjson.loads("{" + members + "}")
