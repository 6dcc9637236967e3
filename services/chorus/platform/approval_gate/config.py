"""Settings of the approval gate (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.contracts.approvals import EscalationStep, Fallback
from chorus.runtime.runner import ServiceSettings
from chorus.web.apikeys import ApiKeySettings


class Settings(ApiKeySettings, ServiceSettings):
    http_port: int = 8113
    """/health, /metrics and the approval policy API."""
    review_chain: list[EscalationStep] = [
        EscalationStep(tier="manager", window_s=8 * 3600),
        EscalationStep(tier="director", window_s=24 * 3600),
    ]
    """Who reviews output a handler could not get right (review.requested), unless the
    approval policy routes it: a tier the default reviewer keys can decide."""
    review_fallback: Fallback = "auto_reject"
