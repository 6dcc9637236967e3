"""Settings of the timer service (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.runtime.runner import ServiceSettings


class Settings(ServiceSettings):
    http_port: int = 8101
    fire_batch_size: int = 500
    """Timers claimed per transaction; replicas each claim their own batch (SKIP LOCKED)."""
    max_idle_s: float = 0.1
    """Longest sleep of the firing loop. A timer scheduled while the loop sleeps can fire
    this late at most; the poll (min(due_at) on a partial index) costs microseconds."""
