"""The session cookie: the session as JSON, sealed with AES-256-GCM (``cryptography``)
under CHORUS_SESSION_KEY, so the browser holds it but can neither read the API key in
it nor change who it says is signed in. Any replica opens it (no session store)."""

from __future__ import annotations

import base64
import binascii
import json
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from chorus.platform.console.domain import Session

COOKIE = "chorus_session"
_AAD = b"chorus-console-session-v1"


class SessionCookies:
    def __init__(self, key_b64: str) -> None:
        key = base64.b64decode(key_b64)
        if len(key) != 32:
            raise ValueError("CHORUS_SESSION_KEY must be base64 of 32 bytes")
        self._aead = AESGCM(key)

    def seal(self, session: Session) -> str:
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, json.dumps(session.as_json()).encode(), _AAD)
        return base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def open(self, cookie: str | None) -> Session | None:
        """The session, or None for a missing, altered or foreign cookie (a fresh one is made)."""
        if not cookie or len(cookie) > 4096:
            return None
        try:
            raw = base64.urlsafe_b64decode(cookie + "=" * (-len(cookie) % 4))
            plain = self._aead.decrypt(raw[:12], raw[12:], _AAD)
            return Session.from_json(json.loads(plain))
        except (ValueError, InvalidTag, KeyError, TypeError, binascii.Error):
            return None
