"""Settings of the gateway (CHORUS_* environment variables)."""

from __future__ import annotations

from pydantic import SecretStr

from chorus.outside.breaker import BreakerPolicy
from chorus.runtime.runner import ServiceSettings
from chorus.web.apikeys import DEMO_GATEWAY_KEY, ApiKeySettings
from chorus.web.http import KEEP_ALIVE_S

DEMO_WEBHOOK_SECRET = "demo-webhook-secret"


class Settings(ApiKeySettings, ServiceSettings):
    http_port: int = 8110
    """/health and /metrics of the runtime (the API has its own port)."""
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    public_url: str = ""
    """Base of the status URLs handed out; defaults to http://<api_host>:<api_port>."""
    audit_url: str = "http://127.0.0.1:8103"
    """The audit projector's read API: what the API says about workflows and approvals."""
    audit_api_key: SecretStr = SecretStr(DEMO_GATEWAY_KEY)
    approval_gate_url: str = "http://127.0.0.1:8113"
    """The approval gate's API: where the approval policy routes are forwarded."""
    """The gateway's own key (role ``service``) at the audit projector's API."""
    api_rate_per_s: float = 20.0
    """Requests per second per API key, across every gateway replica (429 beyond)."""
    api_burst: float = 40.0
    api_max_connections: int = 200
    """Open connections the API serves at once; beyond, new ones get a 503 at once."""
    api_keep_alive_s: float = KEEP_ALIVE_S
    """An idle keep-alive connection is closed after this (longer than clients keep one:
    chorus.web.http.KEEP_ALIVE_S)."""
    api_body_timeout_s: float = 30.0
    """A request body must have arrived within this (408 otherwise): a client trickling
    bytes cannot hold one of the API's connections for long."""
    max_body_bytes: int = 1_048_576
    """Request bodies above this are refused with 413 before they are read or authenticated."""
    webhook_secret: str = DEMO_WEBHOOK_SECRET
    """Standard Webhooks signing secret(s) of completion callbacks (``whsec_<base64>``, or
    plain text); several, space-separated, while a receiver rotates (all sign)."""
    webhook_secrets: dict[str, str] = {}
    """A receiver's own secret(s), by its origin: ``{"https://hooks.example.com": "whsec_..."}``."""
    webhook_timeout_s: float = 10.0
    webhook_breaker: BreakerPolicy = BreakerPolicy()
    """Each receiver host's circuit breaker (``webhooks:<host>``)."""
    deadlines_s: dict[str, float] = {}
    """Workflow-level deadline per workflow type, over the registry's (workflows.yaml); a
    workflow still running then times out."""

    def demo_secrets(self) -> list[str]:
        found = super().demo_secrets()
        if self.audit_api_key.get_secret_value() == DEMO_GATEWAY_KEY:
            found.append("CHORUS_AUDIT_API_KEY")
        if DEMO_WEBHOOK_SECRET in self.webhook_secret.split():
            found.append("CHORUS_WEBHOOK_SECRET")
        return found
