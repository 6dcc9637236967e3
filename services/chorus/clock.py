"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.kernel.clock``."""

from chorus.kernel.clock import (
    Clock,
    ManualClock,
    SystemClock,
)

__all__ = ["Clock", "ManualClock", "SystemClock"]
