"""Structured JSON log lines: one per record of the logging module, with the workflow, event
and trace of the record at hand, and nothing secret or personal in them."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any

from chorus.base.logs import context_fields, personal_values, redact, scrub


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
    if isinstance(value, dict | list | tuple) and personal_values():
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
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
            **{k: scrub(v) for k, v in context_fields().items()},
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
