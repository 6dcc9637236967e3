"""Settings of the key service (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.base.settings import is_demo_key_service_credential
from chorus.runtime.runner import ServiceSettings

DEMO_MASTER_KEYS = {"local": "ZGVtby1tYXN0ZXIta2V5LW5vdC1mb3ItcHJvZC11c2U="}
"""The published master key of the local demo (32 bytes, base64): refused outside demo mode."""


class Settings(ServiceSettings):
    http_port: int = 8117
    key_service_clients: dict[str, str] = {}
    """CHORUS_KEY_SERVICE_CLIENTS: credential -> the service presenting it (its registry
    name), one per service; nothing else is accepted here, and these nowhere else. Empty, in
    the demo: each registered service's demo credential."""
    master_keys: dict[str, str] = DEMO_MASTER_KEYS
    """CHORUS_MASTER_KEYS: region -> base64 of a 32-byte AES key that wraps that region's
    data keys. This key store holds the regions listed here and no other (residency): give
    each region's replicas only their own region's master key."""

    def demo_secrets(self) -> list[str]:
        found = super().demo_secrets()
        if any(self.master_keys.get(r) == k for r, k in DEMO_MASTER_KEYS.items()):
            found.append("CHORUS_MASTER_KEYS (holds the demo master key)")
        clients = self.key_service_clients
        if not clients or any(is_demo_key_service_credential(c) for c in clients):
            found.append("CHORUS_KEY_SERVICE_CLIENTS (unset, or holding a demo credential)")
        return found
