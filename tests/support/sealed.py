"""Reading sealed personal data in tests, as a service that declared it needs it would:
through the key service the test session runs (CHORUS_KEY_STORES)."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import httpx

from chorus.base.settings import DEMO_SERVICE_KEY
from chorus.privacy.crypto import Token
from chorus_contracts.base import is_sealed


def opened(value: Any, key_service: str | None = None) -> Any:
    """``value`` with every sealed token in it opened (recursively), with the keys of
    ``key_service`` (the session's, by default); a destroyed key raises."""
    if is_sealed(value):
        token = Token.parse(value)
        url = key_service or json.loads(os.environ["CHORUS_KEY_STORES"])[token.region]
        response = httpx.get(
            f"{url.rstrip('/')}/v1/data-keys/{token.kid}",
            headers={"Authorization": f"Bearer {DEMO_SERVICE_KEY}"},
            timeout=10,
        )
        response.raise_for_status()
        return opened(token.open(base64.b64decode(response.json()["key"])), key_service)
    if isinstance(value, dict):
        return {k: opened(v, key_service) for k, v in value.items()}
    if isinstance(value, list):
        return [opened(v, key_service) for v in value]
    return value
