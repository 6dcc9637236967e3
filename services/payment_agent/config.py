"""Settings of the payment agent (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.runtime.runner import ServiceSettings


class Settings(ServiceSettings):
    http_port: int = 8114
    payment_api_url: str = "http://127.0.0.1:9400"
    """Base URL of the payment provider (the sandbox's in the demo and tests)."""
    payment_api_key: str = "sandbox-key"
    payment_timeout_s: float = 20.0
    payment_max_attempts: int = 6
    """Transient failures are retried this often before the payment counts as failed."""
