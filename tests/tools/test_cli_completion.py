"""Shell completion offers the registry's event types and topics (lanes included)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from chorus.tools.cli.options import complete_event_types, complete_topics

CHORUS = Path(sys.executable).parent / "chorus"


def test_completion_offers_event_types_topics_and_their_lanes() -> None:
    assert complete_event_types("invoice.v") == ["invoice.validated"]
    offered = complete_topics("procurement")
    assert "procurement.events" in offered and "procurement.events.high" in offered
    assert complete_topics("nothing-like-this") == []


def test_the_shell_gets_the_completions_from_the_console_script(tmp_path: Path) -> None:
    answer = subprocess.run(
        [str(CHORUS)],
        env={
            **os.environ,
            "_CHORUS_COMPLETE": "complete_bash",
            "COMP_WORDS": "chorus subscribe approval.r",
            "COMP_CWORD": "2",
        },
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert answer.stdout.split() == ["approval.requested", "approval.routed"]
