"""Settings of the approval gate (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.runtime.runner import ServiceSettings
from chorus_contracts.approvals import EscalationStep, Fallback


class Settings(ServiceSettings):
    http_port: int = 8113
    review_chain: list[EscalationStep] = [
        EscalationStep(tier="operator", window_s=24 * 3600),
        EscalationStep(tier="director", window_s=24 * 3600),
    ]
    """Who reviews output a handler could not get right (review.requested)."""
    review_fallback: Fallback = "auto_reject"
