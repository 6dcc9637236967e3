"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.outside.external``."""

from chorus.outside.external import (
    ExternalRejection,
    call_json,
)

__all__ = ["ExternalRejection", "call_json"]
