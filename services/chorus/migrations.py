"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.kernel.migrations``."""

from chorus.kernel.migrations import (
    Migration,
    baseline,
    migrate,
)

__all__ = ["Migration", "baseline", "migrate"]
