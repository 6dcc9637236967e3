"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.base.settings``."""

from chorus.base.settings import (
    LOCAL_DATABASE_URL,
    LOCAL_KAFKA,
    ChorusSettings,
)
from chorus.runtime.settings import load_settings

__all__ = ["LOCAL_DATABASE_URL", "LOCAL_KAFKA", "ChorusSettings", "load_settings"]
