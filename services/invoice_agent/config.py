"""Settings of the invoice agent (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.llm import LLMSettings
from chorus.runtime.runner import ServiceSettings


class Settings(ServiceSettings, LLMSettings):
    http_port: int = 8111
