"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.kernel.errors``."""

from chorus.kernel.errors import (
    PersistentError,
    SemanticError,
    TransientError,
)

__all__ = ["PersistentError", "SemanticError", "TransientError"]
