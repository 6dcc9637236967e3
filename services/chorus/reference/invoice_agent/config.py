"""Settings of the invoice agent (CHORUS_* environment variables)."""

from __future__ import annotations

from pydantic import Field

from chorus.llm import LLMSettings
from chorus.runtime.runner import ServiceSettings


class Settings(ServiceSettings, LLMSettings):
    http_port: int = 8111
    validated_version: int = Field(default=3, ge=2, le=3)
    """CHORUS_VALIDATED_VERSION: the version of invoice.validated this release publishes. 3
    says which checks passed and how the invoice was read; 2 is what releases before it
    published, for as long as a consumer that reads only v2 still runs (consumers first)."""
