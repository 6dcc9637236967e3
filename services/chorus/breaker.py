"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.outside.breaker``."""

from chorus.outside.breaker import (
    BreakerPolicy,
)

__all__ = ["BreakerPolicy"]
