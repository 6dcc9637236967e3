"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.base.errors``."""

from chorus.base.errors import (
    PersistentError,
    RateLimitedError,
    SemanticError,
    TransientError,
)

__all__ = ["PersistentError", "RateLimitedError", "SemanticError", "TransientError"]
