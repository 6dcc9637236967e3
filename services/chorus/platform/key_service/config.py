"""Settings of the key service (CHORUS_* environment variables)."""

from __future__ import annotations

from pydantic import model_validator

from chorus.base.errors import ConfigError
from chorus.base.settings import is_demo_key_service_credential
from chorus.privacy.feature import KEY_SERVICE_TLS
from chorus.runtime.runner import ServiceSettings
from chorus.web.tls import ServerTls, server_tls

DEMO_MASTER_KEYS = {"local": "ZGVtby1tYXN0ZXIta2V5LW5vdC1mb3ItcHJvZC11c2U="}
"""The published master key of the local demo (32 bytes, base64): refused outside demo mode."""


class Settings(ServiceSettings):
    http_port: int = 8117
    """/health and /metrics (plain HTTP: they hold no secret)."""
    api_host: str = "127.0.0.1"
    api_port: int = 8127
    """The data-key API, over TLS only."""
    key_service_tls_cert_file: str = ""
    """CHORUS_KEY_SERVICE_TLS_CERT_FILE: the API's certificate chain (PEM), for the names its
    callers reach it by (CHORUS_KEY_STORES); they verify it (CHORUS_KEY_SERVICE_CA_FILE)."""
    key_service_tls_key_file: str = ""
    """CHORUS_KEY_SERVICE_TLS_KEY_FILE: its private key (PEM)."""
    key_service_clients: dict[str, str] = {}
    """CHORUS_KEY_SERVICE_CLIENTS: credential -> the service presenting it (its registry
    name), one per service; nothing else is accepted here, and these nowhere else. Empty, in
    the demo: each registered service's demo credential."""
    master_keys: dict[str, str] = DEMO_MASTER_KEYS
    """CHORUS_MASTER_KEYS: region -> base64 of a 32-byte AES key that wraps that region's
    data keys. This key store holds the regions listed here and no other (residency): give
    each region's replicas only their own region's master key."""

    @model_validator(mode="after")
    def _served_over_tls(self) -> Settings:
        self.tls()  # it does not start without its certificate (not even in the demo)
        return self

    def tls(self) -> ServerTls:
        try:
            return server_tls(
                self.key_service_tls_cert_file,
                self.key_service_tls_key_file,
                what="the key service's API",
                variables=KEY_SERVICE_TLS,
            )
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    def demo_secrets(self) -> list[str]:
        found = super().demo_secrets()
        if any(self.master_keys.get(r) == k for r, k in DEMO_MASTER_KEYS.items()):
            found.append("CHORUS_MASTER_KEYS (holds the demo master key)")
        clients = self.key_service_clients
        if not clients or any(is_demo_key_service_credential(c) for c in clients):
            found.append("CHORUS_KEY_SERVICE_CLIENTS (unset, or holding a demo credential)")
        return found
