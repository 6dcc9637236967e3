"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.observability.tracing``."""

from chorus.observability.tracing import link

__all__ = ["link"]
