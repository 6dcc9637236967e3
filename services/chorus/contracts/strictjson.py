"""Reading JSON from outside: I-JSON (RFC 7493) plus what PostgreSQL can store, or a clear refusal.

Every byte that reaches Chorus from a record or a request body is read here, so
that whatever the bytes are, the result is a JSON value every later step can
store and re-encode, or a :class:`StrictJSONError` naming what is wrong. Never
any other exception: not a ``RecursionError`` from deep nesting, not a
``UnicodeEncodeError`` from a lone surrogate at commit time, not a ``NaN`` that
``jsonb`` refuses.

The rules:
- UTF-8 only, strictly (no encoded surrogates; Python's ``json.loads(bytes)``
  would otherwise accept UTF-16 and surrogate bytes).
- At most ``MAX_DEPTH`` levels of nesting, checked *before* parsing.
- No duplicate member names (parsers disagree on which one wins).
- Numbers: finite, integers within ±(2**53 - 1), the range every JSON
  implementation reads exactly; an integral number is an integer however it is
  spelled (``387.0`` reads as ``387``, as JSON Schema counts it).
- No string (value or member name) with NUL or an unpaired surrogate: PostgreSQL
  text and jsonb cannot hold them. Refused, never rewritten, so an event's bytes
  mean the same to every consumer.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64
MAX_SAFE_INTEGER = 2**53 - 1

# A JSON string literal (unrolled loop: linear, no backtracking on long strings). The
# closing quote is optional: with it required, every unterminated quote would rescan the
# rest of the text, quadratic on hostile input ('"' + '\\"' * n took minutes at 1 MiB).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class StrictJSONError(ValueError):
    """The text is not JSON Chorus accepts. ``pointer`` names the value when it is known,
    ``position`` the character offset when the text itself is malformed."""

    def __init__(self, message: str, *, pointer: str | None = None, position: int | None = None) -> None:
        super().__init__(message)
        self.pointer = pointer
        self.position = position


def loads(raw: bytes | str, *, exact_integers: bool = True) -> Any:
    """Parse ``raw`` under the rules above; raises only :class:`StrictJSONError`.

    ``exact_integers=False`` drops the integer-range rule: for request bodies, whose every
    kept number is bounded by its model (unknown members are dropped, not stored)."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError as exc:
        raise StrictJSONError(
            f"not UTF-8: byte {exc.start} is {raw[exc.start : exc.start + 1]!r}", position=exc.start
        ) from None
    _check_depth(text)
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object,
            parse_int=_integer if exact_integers else int,
            parse_float=_float,
            parse_constant=_constant,
        )
    except StrictJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"not JSON: {exc.msg} at character {exc.pos}", position=exc.pos) from None
    except ValueError as exc:  # e.g. an integer longer than Python converts
        raise StrictJSONError(f"not JSON Chorus reads: {exc}") from None
    except RecursionError:  # unreachable after _check_depth; kept so no other class escapes
        raise StrictJSONError(f"nested deeper than {MAX_DEPTH} levels") from None
    # NUL and surrogates can only come from \u escapes once the text is strict UTF-8.
    if "\\u" in text:
        found = unstorable(value)
        if found is not None:
            raise StrictJSONError(found[1], pointer=found[0])
    return value


def unstorable(value: Any, prefix: str = "") -> tuple[str, str] | None:
    """The pointer and a description of the first string PostgreSQL cannot store, if any."""
    stack: list[tuple[str, Any]] = [(prefix, value)]
    while stack:
        pointer, item = stack.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem:
                return pointer or "/", f"{pointer or '/'}: {problem}"
        elif isinstance(item, dict):
            for key, child in item.items():
                child_pointer = f"{pointer}/{escape(str(key))}"
                problem = _text_problem(key) if isinstance(key, str) else None
                if problem:
                    return child_pointer, f"{child_pointer}: the member name {problem}"
                stack.append((child_pointer, child))
        elif isinstance(item, list | tuple):
            stack.extend((f"{pointer}/{i}", child) for i, child in enumerate(item))
    return None


def escape(token: str) -> str:
    """A JSON pointer reference token (RFC 6901), itself storable (see :func:`storable`)."""
    return storable(token.replace("~", "~0").replace("/", "~1"))


def storable(text: str) -> str:
    """``text`` with NUL and unpaired surrogates spelled as ``\\uXXXX``: for messages that
    quote input (errors, pointers) and must themselves be storable and printable."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _text_problem(text: str) -> str | None:
    match = _UNSTORABLE.search(text)
    if match is None:
        return None
    char = match.group()
    what = "a NUL character" if char == "\x00" else f"an unpaired surrogate U+{ord(char):04X}"
    return f"contains {what} at character {match.start()}, which cannot be stored"


def _check_depth(text: str) -> None:
    # Fast path: fewer opening brackets than the limit cannot nest deeper than it.
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for bracket in _BRACKETS.findall(_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_DEPTH:
            raise StrictJSONError(f"nested deeper than {MAX_DEPTH} levels")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError(f"duplicate member name {key!r}")
            seen.add(key)
    return result


def _integer(literal: str) -> int:
    # Fifteen digits or fewer are always in range; only longer literals pay for the check.
    if len(literal) > 15 and abs(int(literal)) > MAX_SAFE_INTEGER:
        raise StrictJSONError(
            f"integer {literal[:24]}{'...' if len(literal) > 24 else ''} is outside ±(2**53 - 1), "
            "the range every JSON reader keeps exact"
        )
    return int(literal)


def _float(literal: str) -> float | int:
    value = float(literal)
    if not math.isfinite(value):
        raise StrictJSONError(f"number {literal[:24]} is out of range (not a finite double)")
    # JSON has one number type: 387.0 is 387. Read integral values as integers, so an
    # integer field accepts every spelling JSON Schema calls an integer.
    if value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
        return int(value)
    return value


def _constant(name: str) -> float:
    raise StrictJSONError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")
