"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.kernel.db``."""

from chorus.kernel.db import (
    create_pool,
)

__all__ = ["create_pool"]
