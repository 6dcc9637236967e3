"""Settings of the payment agent (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.breaker import BreakerPolicy
from chorus.runtime.runner import ServiceSettings

DEMO_PAYMENT_API_KEY = "sandbox-key"


class Settings(ServiceSettings):
    http_port: int = 8114
    payment_api_url: str = "http://127.0.0.1:9400"
    """Base URL of the payment provider (the sandbox's in the demo and tests)."""
    payment_api_key: str = DEMO_PAYMENT_API_KEY
    """The provider's API key; the default is the sandbox's (demo only)."""
    payment_timeout_s: float = 20.0
    payment_max_attempts: int = 6
    """Transient failures are retried this often before the payment counts as failed."""
    payment_rate_per_s: float = 50.0
    """Calls per second to the provider, for every replica together."""
    payment_breaker: BreakerPolicy = BreakerPolicy()
    """When the provider's breaker opens (JSON: failure_ratio, min_calls, window_s, open_s, probes)."""

    def demo_secrets(self) -> list[str]:
        found = super().demo_secrets()
        if self.payment_api_key == DEMO_PAYMENT_API_KEY:
            found.append("CHORUS_PAYMENT_API_KEY")
        return found
