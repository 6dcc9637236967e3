"""``chorus status`` names every circuit breaker that is not closed."""

from __future__ import annotations

import pytest

from chorus.tools.cli.status import _print


def test_chorus_status_names_a_breaker_that_is_not_closed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    report = {
        "service": "payment_agent",
        "status": "ok",
        "breakers": {"payments": "open", "llm": "closed"},
    }
    _print([report, {"service": "report_agent", "status": "ok", "breakers": {"llm": "closed"}}])
    out = capsys.readouterr().out
    assert "payments open" in out and "1 closed" in out
    assert "payment_agent: circuit breaker payments is open: calls fail fast" in out
