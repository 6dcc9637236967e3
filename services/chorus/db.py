"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.base.db``."""

from chorus.base.db import (
    create_pool,
)

__all__ = ["create_pool"]
