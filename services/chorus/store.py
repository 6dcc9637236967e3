"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.kernel.store``."""

from chorus.kernel.store import (
    ConflictError,
)

__all__ = ["ConflictError"]
