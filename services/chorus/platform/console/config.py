"""Settings of the console (CHORUS_* environment variables).

The console keeps no data: it signs people in with their API key and asks the public
APIs (gateway, dead-letter service, outcome analytics) with that key, so every page shows
exactly what the APIs let that person see.
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from chorus.base.settings import ChorusSettings
from chorus.web.links import DEMO_LINK_KEY

DEMO_SESSION_KEY = "ZGVtby1jb25zb2xlLXNlc3Npb24ta2V5LW5vLXByb2Q="
"""The published session key of the local demo (base64 of 32 bytes): refused outside demo mode."""


class Settings(ChorusSettings):
    http_host: str = "127.0.0.1"
    http_port: int = 8120
    gateway_url: str = "http://127.0.0.1:8080"
    deadletter_url: str = "http://127.0.0.1:8102"
    analytics_url: str = "http://127.0.0.1:8104"
    notifier_url: str = "http://127.0.0.1:8118"
    api_timeout_s: float = Field(default=10.0, gt=0)
    session_key: SecretStr = SecretStr(DEMO_SESSION_KEY)
    """CHORUS_SESSION_KEY: base64 of 32 bytes; seals the session cookie (AES-256-GCM)."""
    link_key: SecretStr = SecretStr(DEMO_LINK_KEY)
    """CHORUS_LINK_KEY: checks the links the notifier signed (the notifier's must be the same)."""
    idle_timeout_s: float = Field(default=30 * 60.0, gt=0)
    """A session nobody used for this long is signed out."""
    session_max_s: float = Field(default=12 * 3600.0, gt=0)
    """However active, a session ends this long after sign-in."""
    secure_cookies: bool | None = None
    """Cookies only over HTTPS. Default: on, except in demo mode (the local demo is plain
    HTTP on 127.0.0.1)."""

    @property
    def cookies_secure(self) -> bool:
        return self.secure_cookies if self.secure_cookies is not None else self.env != "demo"

    def demo_secrets(self) -> list[str]:
        # No database: only the console's own secrets count.
        found = []
        if self.session_key.get_secret_value() == DEMO_SESSION_KEY:
            found.append("CHORUS_SESSION_KEY (the demo's)")
        if self.link_key.get_secret_value() == DEMO_LINK_KEY:
            found.append("CHORUS_LINK_KEY (the demo's)")
        return found
