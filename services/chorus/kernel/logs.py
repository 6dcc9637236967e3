"""Structured JSON logs carrying trace_id, workflow_id and event_id of the event at hand."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
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


class RedactSecrets(logging.Filter):
    """Every line, whoever logs it (httpx logs each request's full URL at INFO), leaves
    the process without the credentials of a URL (a submitter's callback URL may hold them)
    and without the personal values the runtime opened for the event at hand."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format call: logging reports it, as it would without us
            return True
        record.msg, record.args = redact(message), None
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            record.fields = {k: _redacted(v) for k, v in extra.items()}
        if record.exc_info and not record.exc_text:
            # Formatted here, redacted once: every formatter then prints the cached text.
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict | list | tuple) and _personal.get():
        text = json.dumps(value, default=str)
        cleaned = scrub(text)
        return cleaned if cleaned != text else value
    return value


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
            **{k: scrub(v) for k, v in _context.get().items()},
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            body.update(extra)
        if record.exc_info:
            body["exc"] = record.exc_text or redact(self.formatException(record.exc_info))
        return json.dumps(body, default=str)


def setup_logging(service: str, level: str = "INFO", json_lines: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter(service))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {service} %(levelname)s %(message)s"))
    handler.addFilter(RedactSecrets())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiokafka logs every coordinator hiccup at INFO/WARNING; keep its errors only.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)


def fields(**values: Any) -> dict[str, Any]:
    """``log.info("...", extra=fields(k=v))`` adds k to the JSON line."""
    return {"fields": values}
