"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.kernel.settings``."""

from chorus.kernel.settings import (
    LOCAL_DATABASE_URL,
    LOCAL_KAFKA,
    ChorusSettings,
    load_settings,
)

__all__ = ["LOCAL_DATABASE_URL", "LOCAL_KAFKA", "ChorusSettings", "load_settings"]
