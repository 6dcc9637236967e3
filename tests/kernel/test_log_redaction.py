"""Secrets never reach the logs: URLs lose their credentials whoever logs them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from chorus.base.logs import fields
from chorus.observability.logs import setup_logging

CALLBACK = "https://alice:hunter2@hooks.example.com/done?run=7&token=tok-9f2e"


@pytest.fixture
def service_log() -> Iterator[io.StringIO]:
    """The service's log lines, as setup_logging writes them (into a buffer, not stderr)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    setup_logging("gateway")
    buffer = io.StringIO()
    root.handlers[0].setStream(buffer)  # type: ignore[attr-defined]
    yield buffer
    root.handlers[:], root.level = handlers, level


def test_a_url_with_credentials_is_logged_without_them(service_log: io.StringIO) -> None:
    logging.getLogger("httpx").info('HTTP Request: POST %s "HTTP/1.1 200 OK"', CALLBACK)
    logging.getLogger("gateway").warning("callback failed", extra=fields(url=CALLBACK))
    try:
        raise ConnectionError(f"cannot reach {CALLBACK}")
    except ConnectionError:
        logging.getLogger("gateway").exception("callback crashed")
    lines = [json.loads(line) for line in service_log.getvalue().splitlines()]
    assert len(lines) == 3
    text = json.dumps(lines)
    assert "hunter2" not in text and "tok-9f2e" not in text
    assert (
        lines[0]["msg"]
        == 'HTTP Request: POST https://***@hooks.example.com/done?run=7&token=*** "HTTP/1.1 200 OK"'
    )
    assert lines[1]["url"].startswith("https://***@hooks.example.com/")


def test_plain_text_logs_redact_tracebacks_too() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    setup_logging("gateway", json_lines=False)
    buffer = io.StringIO()
    root.handlers[0].setStream(buffer)  # type: ignore[attr-defined]
    try:
        try:
            raise ConnectionError(f"cannot reach {CALLBACK}")
        except ConnectionError:
            logging.getLogger("gateway").exception("callback crashed")
        logging.getLogger("gateway").info("%s and %s", "one argument only")  # noqa: PLE1206  (a caller's bug)
    finally:
        root.handlers[:], root.level = handlers, level
    text = buffer.getvalue()
    assert "callback crashed" in text and "ConnectionError: cannot reach https://***@hooks" in text
    assert "hunter2" not in text
