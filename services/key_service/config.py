"""Settings of the key service (CHORUS_* environment variables)."""

from __future__ import annotations

from chorus.runtime.runner import ServiceSettings
from chorus.web.apikeys import ApiKeySettings

DEMO_MASTER_KEYS = {"local": "ZGVtby1tYXN0ZXIta2V5LW5vdC1mb3ItcHJvZC11c2U="}
"""The published master key of the local demo (32 bytes, base64): refused outside demo mode."""


class Settings(ApiKeySettings, ServiceSettings):
    http_port: int = 8117
    master_keys: dict[str, str] = DEMO_MASTER_KEYS
    """CHORUS_MASTER_KEYS: region -> base64 of a 32-byte AES key that wraps that region's
    data keys. This key store holds the regions listed here and no other (residency): give
    each region's replicas only their own region's master key."""

    def demo_secrets(self) -> list[str]:
        found = super().demo_secrets()
        if any(self.master_keys.get(r) == k for r, k in DEMO_MASTER_KEYS.items()):
            found.append("CHORUS_MASTER_KEYS (holds the demo master key)")
        return found
