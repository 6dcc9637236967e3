"""Settings of triage_agent (CHORUS_* environment variables, as every Chorus service)."""

from __future__ import annotations

from chorus.contracts.approvals import EscalationStep
from chorus.llm import LLMSettings
from chorus.runtime.runner import ServiceSettings


class Settings(ServiceSettings, LLMSettings):
    http_port: int = 8300
    """/health and /metrics (and this service's API, if it gets one)."""
    crm_url: str = "http://127.0.0.1:9400/crm"
    """The CRM's API (the sandbox stands in for it in development: project.yaml)."""
    helpdesk_url: str = "http://127.0.0.1:9400/helpdesk"
    """Where replies to customers go out."""
    refund_threshold_cents: int = 5000
    """A reply that grants more than this waits for a person's approval."""
    approval_chain: tuple[EscalationStep, ...] = (EscalationStep(tier="manager", window_s=4 * 3600),)
    """Who approves a large refund, and how long each tier has (the approval gate escalates)."""
    reply_within_s: float = 8 * 3600
    """The customer gets an answer within this time, or the ticket is overdue."""
