"""Settings of the report agent (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.contracts.approvals import EscalationStep, Fallback
from chorus.llm import LLMSettings
from chorus.runtime.runner import ServiceSettings


class Settings(ServiceSettings, LLMSettings):
    http_port: int = 8115
    delivery_timeout_s: float = 20.0
    approval_chain: list[EscalationStep] = [EscalationStep(tier="editor", window_s=4 * 3600)]
    approval_fallback: Fallback = "auto_reject"
