"""Settings of the audit projector (CHORUS_* environment variables)."""

from __future__ import annotations

from typing import Literal

from chorus.runtime.runner import ServiceSettings
from chorus.web.apikeys import ApiKeySettings


class Settings(ApiKeySettings, ServiceSettings):
    http_port: int = 8103
    service_name: str = "audit_projector"
    """Service name: its PostgreSQL schema (runtime tables, projection and ledger), its
    default consumer group and producer name. Only tests run a projector under another."""
    retention_days: dict[str, float] = {"procurement": 90.0, "research_report": 30.0}
    """Maximum lifetime per workflow type, counted from the workflow's first event
    (JSON in CHORUS_RETENTION_DAYS)."""
    default_retention_days: float = 30.0
    """Lifetime of workflow types not in ``retention_days``."""
    janitor_mode: Literal["archive", "purge"] = "archive"
    """archive: copy state, parked and projection rows to ``<name>.archive``, then delete;
    purge: delete only."""
    janitor_interval_s: float = 3600.0
    """Time between janitor passes (on the injected clock)."""
    parked_alert_after_s: float = 3600.0
    """A workflow waiting behind a dead letter this long raises workflow.attention_needed."""
    attention_check_s: float = 60.0
    """Time between looks for such workflows (on the injected clock)."""
    janitor_batch_size: int = 500
    """Workflows removed per transaction."""
    data_holders: list[str] = [
        "approval_gate",
        "audit_projector",
        "budget_agent",
        "deadletter_service",
        "gateway",
        "invoice_agent",
        "key_service",
        "notifier",
        "payment_agent",
        "report_agent",
        "rollout_service",
        "source_fetcher",
        "timer_service",
    ]
    """Services expected to confirm an erasure (every service on the runtime; a contract
    test holds this to services/): an erasure is complete when all of them did
    (JSON in CHORUS_DATA_HOLDERS)."""
