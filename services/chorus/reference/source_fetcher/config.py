"""Settings of the source fetcher (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.breaker import BreakerPolicy
from chorus.runtime.runner import ServiceSettings


class Settings(ServiceSettings):
    http_port: int = 8116
    source_timeout_s: float = 20.0
    source_breaker: BreakerPolicy = BreakerPolicy()
    """Each source host's circuit breaker (``sources:<host>``)."""
