"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.outside.dependencies``."""

from chorus.outside.dependencies import (
    Dependency,
    Guarding,
    Guards,
    dependencies,
)

__all__ = ["Dependency", "Guarding", "Guards", "dependencies"]
