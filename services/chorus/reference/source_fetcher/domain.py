"""The source fetcher's decisions (no I/O)."""

from __future__ import annotations

from datetime import datetime

SERVICE = "source_fetcher"
"""The name this service publishes under (its ServiceSpec name, its consumer group)."""


def too_late(now: datetime, answer_by: datetime) -> str | None:
    """Why not to fetch: the stage that asked closed at ``answer_by``, nobody waits any more."""
    if now < answer_by:
        return None
    return f"the stage's deadline {answer_by.isoformat()} passed before the source answered"
