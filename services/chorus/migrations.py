"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.base.migrations``."""

from chorus.base.migrations import (
    Migration,
    baseline,
    migrate,
)

__all__ = ["Migration", "baseline", "migrate"]
