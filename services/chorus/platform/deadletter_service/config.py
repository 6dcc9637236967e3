"""Settings of the dead-letter service (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.runtime.runner import ServiceSettings
from chorus.web.apikeys import ApiKeySettings


class Settings(ApiKeySettings, ServiceSettings):
    http_port: int = 8102
    max_event_bytes: int = 8 * 1_048_576
    """A dead letter carries the original record base64-encoded plus a traceback, so it
    is larger than the events it wraps; refusing it would dead-letter a dead letter."""
    metrics_interval_s: float = 5.0
    """How often the depth and age gauges are recomputed from the letters table."""
    bulk_redrive_max: int = 1000
    """Most letters one bulk redrive may publish (its filter's limit is capped here)."""
