"""Search queries over workflows: ``vendor = 'acme' AND amount > 10000 AND status = 'waiting'``.

What a user may write, and nothing else (there is no SQL in it: the adapter turns the parsed
query into SQL whose every value is a bound parameter and whose every name was checked here):

- a comparison ``name op value``: ``=``, ``!=``, and for numbers ``<``, ``<=``, ``>``, ``>=``;
  ``name IN (value, ...)``;
- values are ``'text'`` (a quote inside doubled: ``'O''Brien'``) or numbers (``10000``, ``-2.5``);
- conditions joined by ``AND`` and ``OR`` (AND binds tighter), negated by ``NOT``, grouped in
  parentheses; keywords in any case.

Names are the workflow types' search attributes (``workflows.yaml``) and ``workflow_type``,
``status`` and ``stage``, which every workflow has. A comparison holds only for a workflow
that has the attribute (``vendor != 'acme'`` does not find a research report; ``NOT vendor =
'acme'`` does).

The grammar is lark's (LALR); what it refuses, and what names or types do not fit, is a
:class:`SearchQueryError` whose message says where and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Literal

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from chorus.contracts.lifecycle import WORKFLOW_STATUSES
from chorus.contracts.registry import Registry

MAX_QUERY = 1000
"""The longest query, in characters."""
MAX_CONDITIONS = 20
MAX_DEPTH = 8
"""How deeply parentheses and NOT may nest."""

AttributeType = Literal["keyword", "number"]
BUILTIN: dict[str, AttributeType] = {"workflow_type": "keyword", "status": "keyword", "stage": "keyword"}
"""Columns every workflow has; the workflow types' declared attributes come beside them."""

Value = str | Decimal

GRAMMAR = r"""
?start: or_
?or_: and_ | or_ _OR and_ -> any_
?and_: not_ | and_ _AND not_ -> all_
?not_: atom | _NOT not_ -> negate
?atom: "(" or_ ")" | comparison
comparison: NAME OP value -> compare
          | NAME _IN "(" value ("," value)* ")" -> member
?value: STRING | NUMBER
_OR.2: /or\b/i
_AND.2: /and\b/i
_NOT.2: /not\b/i
_IN.2: /in\b/i
OP: "<=" | ">=" | "!=" | "=" | "<" | ">"
NAME: /(?!(and|or|not|in)\b)[A-Za-z_][A-Za-z0-9_]*/i
STRING: /'(?:[^']|'')*'/
NUMBER: /-?[0-9]+(\.[0-9]+)?/
%ignore /\s+/
"""

_WORDS = {
    "_OR": "OR",
    "_AND": "AND",
    "_NOT": "NOT",
    "_IN": "IN",
    "OP": "a comparison (= != < <= > >=)",
    "NAME": "an attribute",
    "STRING": "'text'",
    "NUMBER": "a number",
    "LPAR": "(",
    "RPAR": ")",
    "COMMA": ",",
    "$END": "the end",
}


class SearchQueryError(ValueError):
    """A query that cannot be run: the message says what is wrong, and where."""


@dataclass(frozen=True)
class Compare:
    """``name op value``; ``op`` ``in`` holds any of ``values``."""

    name: str
    type: AttributeType
    op: Literal["=", "!=", "<", "<=", ">", ">=", "in"]
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Not:
    condition: Condition


@dataclass(frozen=True)
class All:
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    conditions: tuple[Condition, ...]


Condition = Compare | Not | All | AnyOf


@cache
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", maybe_placeholders=False)


@v_args(inline=True)
class _Tree(Transformer[Token, object]):
    """lark's tree as raw conditions (names and values checked afterwards)."""

    def compare(self, name: Token, op: Token, value: Token) -> tuple[str, str, tuple[Token, ...]]:
        return (str(name), str(op), (value,))

    def member(self, name: Token, *values: Token) -> tuple[str, str, tuple[Token, ...]]:
        return (str(name), "in", values)

    def all_(self, left: object, right: object) -> tuple[str, object, object]:
        return ("and", left, right)

    def any_(self, left: object, right: object) -> tuple[str, object, object]:
        return ("or", left, right)

    def negate(self, inner: object) -> tuple[str, object]:
        return ("not", inner)


def parse(query: str, attributes: Mapping[str, AttributeType]) -> Condition:
    """``query`` as a condition over the built-in columns and ``attributes`` (name -> type);
    :class:`SearchQueryError` naming the first thing wrong."""
    if not query.strip():
        raise SearchQueryError("the query is empty: write a condition such as status = 'waiting'")
    if len(query) > MAX_QUERY:
        raise SearchQueryError(f"the query is {len(query)} characters long; at most {MAX_QUERY}")
    try:
        tree = _Tree().transform(_parser().parse(query))
    except UnexpectedInput as exc:
        raise SearchQueryError(_syntax(query, exc)) from None
    except RecursionError:  # lark's tree walk recurses; a MAX_QUERY of NOTs is deeper than Python goes
        raise SearchQueryError(f"conditions are nested more than {MAX_DEPTH} deep") from None
    except VisitError as exc:  # pragma: no cover - the transformer raises nothing of its own
        raise SearchQueryError(str(exc.orig_exc)) from None
    known = {**BUILTIN, **attributes}
    count = [0]
    return _checked(tree, known, 0, count)


def _checked(node: object, known: Mapping[str, AttributeType], depth: int, count: list[int]) -> Condition:
    if depth > MAX_DEPTH:
        raise SearchQueryError(f"conditions are nested more than {MAX_DEPTH} deep")
    assert isinstance(node, tuple)
    kind = node[0]
    if kind == "not":
        return Not(_checked(node[1], known, depth + 1, count))
    if kind in ("and", "or"):
        # a AND b AND c arrives as ((a AND b) AND c): one flat conjunction, one level deep.
        operands, pending = [], [node]
        while pending:
            item = pending.pop()
            if isinstance(item, tuple) and item[0] == kind:
                pending.extend(reversed(item[1:]))
            else:
                operands.append(item)
        parts = tuple(_checked(child, known, depth + 1, count) for child in operands)
        return All(parts) if kind == "and" else AnyOf(parts)
    count[0] += 1
    if count[0] > MAX_CONDITIONS:
        raise SearchQueryError(f"the query has more than {MAX_CONDITIONS} comparisons")
    name, op, raw = node
    return _comparison(name, op, raw, known)


def _comparison(name: str, op: str, raw: tuple[Token, ...], known: Mapping[str, AttributeType]) -> Compare:
    if name not in known:
        raise SearchQueryError(
            f"unknown attribute {name!r}: search by {', '.join(sorted(known))} (names are case-sensitive)"
        )
    kind = known[name]
    values: list[Value] = []
    for token in raw:
        if token.type == "STRING":
            if kind == "number":
                raise SearchQueryError(
                    f"{name} is a number: compare it with a number ({name} > 10000), not text"
                )
            values.append(str(token)[1:-1].replace("''", "'"))
        else:
            if kind == "keyword":
                raise SearchQueryError(f"{name} is text: quote what it is compared with ({name} = '{token}')")
            try:
                values.append(Decimal(str(token)))
            except InvalidOperation:  # pragma: no cover - the grammar admits only digits
                raise SearchQueryError(f"{token} is not a number") from None
    if kind == "keyword" and op in ("<", "<=", ">", ">="):
        raise SearchQueryError(f"{name} is text: it is compared with =, != or IN, not {op}")
    if name == "status":
        unknown = [v for v in values if v not in WORKFLOW_STATUSES]
        if unknown:
            raise SearchQueryError(f"status {unknown[0]!r} is none of: {', '.join(WORKFLOW_STATUSES)}")
    return Compare(name, kind, op, tuple(values))  # type: ignore[arg-type]


def _syntax(query: str, exc: UnexpectedInput) -> str:
    """Where the query stops making sense, and what could come there."""
    column = getattr(exc, "column", None)
    where = f"at column {column}" if isinstance(column, int) and column > 0 else "at its end"
    if isinstance(exc, UnexpectedCharacters):
        rest = query[exc.pos_in_stream :]
        if rest.startswith("'"):
            return f"{where}: the text that starts here is never closed with a '"
        word = re.match(r"[A-Za-z_][A-Za-z0-9_]*", rest)
        if word is None:
            return (
                f"{where}: {rest[:1]!r} is not part of a query (attributes, = != < <= > >=, IN, "
                "'text', numbers, AND, OR, NOT, parentheses)"
            )
        allowed = sorted({_WORDS.get(name, name) for name in exc.allowed or ()})
        return f"{where}: expected {' or '.join(allowed)}, found {word.group()!r}"
    names = getattr(exc, "accepts", None) or getattr(exc, "expected", None) or ()
    expected = sorted({_WORDS.get(name, name) for name in names})
    wanted = f"expected {' or '.join(expected)}" if expected else "something else was expected"
    if isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        bare = re.sub(r"'(?:[^']|'')*'", "", query)  # parentheses in text do not count
        if bare.count("(") > bare.count(")"):
            return "the query ends too soon: a ( is never closed"
        return f"the query ends too soon: {wanted}"
    token = exc.token if isinstance(exc, UnexpectedToken) else None
    return f"{where}: {wanted}, found {str(token)!r}" if token is not None else f"{where}: {wanted}"


def attribute_types(registry: Registry) -> dict[str, AttributeType]:
    """Every search attribute the registry's workflow types declare, with its type (a name
    has one type across types: the registry refuses two)."""
    return {
        name: declared.type
        for workflow_type in registry.workflows
        for name, declared in registry.search_attributes(workflow_type).items()
    }
