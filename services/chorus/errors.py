"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.base.errors``."""

from chorus.base.errors import (
    PersistentError,
    SemanticError,
    TransientError,
)
from chorus.outside.ratelimit import RateLimitedError

__all__ = ["PersistentError", "RateLimitedError", "SemanticError", "TransientError"]
