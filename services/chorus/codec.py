"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.kernel.codec``."""

from chorus.kernel.codec import (
    Event,
    upcast,
)

__all__ = ["Event", "upcast"]
