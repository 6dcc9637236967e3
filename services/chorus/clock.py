"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.base.clock``."""

from chorus.base.clock import (
    Clock,
    ManualClock,
    SystemClock,
)

__all__ = ["Clock", "ManualClock", "SystemClock"]
