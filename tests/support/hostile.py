"""Hostile input for fuzzing: strategies (hypothesis) and a fixed corpus (live runs).

What an attacker or a careless producer sends: text PostgreSQL cannot store (NUL,
unpaired surrogates), every script and emoji, control characters, huge and
non-finite numbers, deep nesting, duplicate member names, and valid events with one
field replaced by any of these.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from hypothesis import strategies as st

SCRIPTS = [
    "Grüße aus München, Straße",
    "東京都の請求書です",
    "🚀✨🧾 emoji 👩‍👩‍👧",
    "שלום עולם",  # RTL
    "مرحبا بالعالم",
    "\u202eevil\u202c",  # bidi override
    "e\u0301",  # combining mark
]
UNSTORABLE = ["\x00", "a\x00b", "\ud800", "x\udfff", "\udbff\udc00"[0]]


def hostile_strings() -> st.SearchStrategy[str]:
    """Any text, including NUL, lone surrogates, control characters and every script."""
    return st.one_of(
        st.text(alphabet=st.characters(codec=None), max_size=50),
        st.sampled_from(SCRIPTS + UNSTORABLE),
        st.text(alphabet=st.sampled_from("\x00\x01\x1f\x7f\u2028\u2029\ufeff\ud800\udfff"), max_size=10),
    )


def hostile_numbers() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(),
        st.integers(min_value=2**53 - 3, max_value=2**53 + 3),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([0, -0.0, 1e308, 5e-324, float("nan"), float("inf")]),
    )


def json_trees(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.none(), st.booleans(), hostile_numbers(), hostile_strings())
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.dictionaries(hostile_strings(), children, max_size=5),
        ),
        max_leaves=max_leaves,
    )


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


def replace_at(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copied = copy.deepcopy(body)
    target = copied
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return copied


def corpus(valid: list[dict[str, Any]], size: int, seed: int) -> list[bytes]:
    """``size`` hostile records: raw junk, and valid envelopes with one field made hostile."""
    rng = random.Random(seed)
    fixed: list[bytes] = [
        b"",
        b"\x00\x01\x02binary",
        b"[" * 100_000,
        b'{"a":' * 70 + b"1" + b"}" * 70,
        "not json at all: Grüße".encode(),
        json.dumps({"event_type": "nope"}).encode(),
        '{"a": 1}'.encode("utf-16"),
    ]
    values: list[Any] = [
        *SCRIPTS,
        *UNSTORABLE,
        "x" * 300,
        "y" * 30_000,
        2**53,
        -(2**63),
        10**30,
        float("nan"),
        float("inf"),
        nested(80),
        nested(10, "deep"),
        {"a": None},
        [],
        True,
        None,
    ]
    records = list(fixed)
    while len(records) < size:
        body = rng.choice(valid)
        path = rng.choice([p for p in _paths(body) if p])
        mutated = replace_at(body, path, rng.choice(values))
        text = json.dumps(mutated, ensure_ascii=rng.random() < 0.5, allow_nan=True)
        if rng.random() < 0.1:  # a duplicate member name smuggled in
            text = text.replace('"event_id"', '"event_id": "x", "event_id"', 1)
        records.append(text.encode("utf-8", "surrogatepass"))
    return records[:size]
