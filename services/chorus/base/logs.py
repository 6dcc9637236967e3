"""What every log line about a record carries: its workflow, event and trace (``log_context``),
and never the personal values opened for it nor a URL's credentials (``redact``). The JSON
lines themselves are written by chorus.observability.logs."""

from __future__ import annotations

import contextvars
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# The default is never mutated: log_context always sets a new dict.
_context: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("chorus_log", default={})  # noqa: B039


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Fields added to every log line written inside the block (per asyncio task)."""
    merged = {**_context.get(), **{k: v for k, v in fields.items() if v is not None}}
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


# Personal values the runtime opened for the event at hand (chorus.privacy.crypto): whatever logs
# them — a handler's message, an exception's text, a dead letter's error — writes
# "[personal]" instead. One mutable set per scope, so that the handler's own task (which
# runs in a copy of the context) adds to the set the pipeline's task reads.
_personal: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("chorus_personal", default=None)
PERSONAL = "[personal]"
_SHORTEST_PERSONAL = 3
"""Shorter strings (a one-letter initial, "no") would blank unrelated words of every line."""


@contextmanager
def personal_scope() -> Iterator[None]:
    """Personal values opened inside the block are scrubbed from its log lines, then forgotten."""
    token = _personal.set(set())
    try:
        yield
    finally:
        _personal.reset(token)


def hide_in_logs(value: Any) -> None:
    """Scrub the strings of ``value`` (an opened personal value) from this scope's log lines."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) >= _SHORTEST_PERSONAL:
                found.add(item)
                found.add(json.dumps(item)[1:-1])  # as it appears inside JSON or a repr
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    hidden = _personal.get()
    if hidden is None:
        _personal.set(found)
    else:
        hidden.update(found)


def scrub(text: str) -> str:
    """``text`` without the personal values opened in this task (longest first)."""
    for value in sorted(_personal.get() or (), key=len, reverse=True):
        if value in text:
            text = text.replace(value, PERSONAL)
    return text


# Credentials that travel inside URLs: user[:password]@ and secret-looking query parameters.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_SECRET_PARAM = re.compile(
    r"(?i)([?&](?:[a-z_-]*(?:token|secret|password|passwd|key|signature|sig|credential|auth)))=[^&#\s\"']*"
)


def redact(text: str) -> str:
    """``text`` without the credentials a URL may carry (``https://***@host/?token=***``)
    and without the personal values opened in this task."""
    return scrub(_SECRET_PARAM.sub(r"\1=***", _USERINFO.sub(r"\1***@", text)))


def fields(**values: Any) -> dict[str, Any]:
    """``log.info("...", extra=fields(k=v))`` adds k to the JSON line."""
    return {"fields": values}


def context_fields() -> dict[str, str]:
    """The fields log_context set for this task."""
    return _context.get()


def personal_values() -> set[str] | None:
    """The personal values opened in this scope (None outside one)."""
    return _personal.get()
