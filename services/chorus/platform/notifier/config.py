"""Settings of the notifier (CHORUS_* environment variables).

Who reviews for which tier, and how to reach them, is configuration here (never event
content): events name a tier; this service knows its people.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from chorus.runtime.runner import ServiceSettings
from chorus.web.apikeys import DEMO_KEYS, ApiKeySettings
from chorus.web.links import DEMO_LINK_KEY


class Reviewer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tier: str = Field(min_length=1, max_length=200)
    email: str | None = Field(default=None, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")


class Submitter(BaseModel):
    """How a person who submits work hears how it ends."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    email: str | None = Field(default=None, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")
    webhook: str | None = Field(default=None, max_length=2000, pattern=r"^https?://")
    """A Slack-compatible incoming webhook (their own channel)."""
    when_waiting: bool = False
    """Also told when their workflow waits for a person (opt-in): every approval routed."""

    @model_validator(mode="after")
    def _reachable(self) -> Submitter:
        if not (self.email or self.webhook):
            raise ValueError("a submitter needs an email or a webhook")
        return self


DEMO_REVIEWERS = {
    key.principal: Reviewer(tier=key.tier, email=f"{key.principal}@example.test")
    for key in DEMO_KEYS.values()
    if key.role == "reviewer" and key.tier
}
"""The demo's reviewers (the demo API keys'), with addresses of the reserved .test domain."""

DEMO_SUBMITTERS = {
    key.principal: Submitter(email=f"{key.principal}@example.test")
    for key in DEMO_KEYS.values()
    if key.role == "submitter"
}
"""The demo's submitters (the demo API keys'), with addresses of the reserved .test domain."""


class Settings(ApiKeySettings, ServiceSettings):
    http_port: int = 8118
    reviewers: dict[str, Reviewer] = DEMO_REVIEWERS
    """CHORUS_REVIEWERS: principal -> {"tier", "email"}: who is told when an approval waits
    on their tier (by e-mail, when they have an address)."""
    submitters: dict[str, Submitter] = DEMO_SUBMITTERS
    """CHORUS_SUBMITTERS: principal -> {"email", "webhook", "when_waiting"}: who is told
    when a workflow they submitted ends (and, opted in, when it waits for a person)."""
    tier_webhooks: dict[str, str] = {}
    """CHORUS_TIER_WEBHOOKS: tier -> a Slack-compatible incoming-webhook URL (the tier's
    channel): one message per approval, with the link."""
    smtp_host: str | None = None
    """CHORUS_SMTP_HOST: the mail server (no e-mail is sent without one)."""
    smtp_port: int = Field(default=25, ge=1, le=65535)
    smtp_starttls: bool = True
    """CHORUS_SMTP_STARTTLS: the mail server must upgrade the connection to TLS before the
    message (and the SMTP password) is sent; one that does not offer STARTTLS gets neither.
    false only for a relay on a private network, as the dev stack's mail sink on loopback."""
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    smtp_from: str = "Chorus <chorus@localhost>"
    smtp_timeout_s: float = Field(default=10.0, gt=0)
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    console_url: str = "http://127.0.0.1:8120"
    """CHORUS_CONSOLE_URL: where links lead (the console's public address)."""
    link_key: SecretStr = SecretStr(DEMO_LINK_KEY)
    """CHORUS_LINK_KEY: signs the links (the console checks them with the same key)."""
    link_ttl_s: float = Field(default=7 * 86400.0, gt=0)
    """How long a link holds when the approval names no window end."""
    delivery_attempts: int = Field(default=8, ge=1, le=50)
    """Tries per message before it is given up (each attempt is recorded)."""
    delivery_backoff_base_s: float = Field(default=5.0, gt=0)
    delivery_backoff_cap_s: float = Field(default=900.0, gt=0)
    delivery_batch: int = Field(default=20, ge=1, le=500)
    delivery_lease_s: float = Field(default=120.0, gt=0)
    """A claimed message is not claimed again by another replica for this long (the send
    must finish within it; the SMTP and webhook timeouts are well inside)."""
    delivery_idle_s: float = Field(default=1.0, gt=0)

    def demo_secrets(self) -> list[str]:
        found = super().demo_secrets()
        if self.link_key.get_secret_value() == DEMO_LINK_KEY:
            found.append("CHORUS_LINK_KEY (the demo's)")
        return found
