"""Signed, expiring links into the console (the notifier writes them, the console checks them).

A link names one page (``/approvals/<id>``), whom it was sent to and until when it
holds, under HMAC-SHA256 with a key both services share (CHORUS_LINK_KEY). It opens
nothing by itself: the console still asks the reader to sign in, and shows the page
only to who may see it. What the signature adds: a link cannot be forged or stretched
past its time, and the console can tell a reviewer that a link has expired (the
approval moved on) instead of showing a page that is no longer theirs to act on.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import urlencode

from chorus.base.compat import StrEnum

DEMO_LINK_KEY = "demo-link-key-not-for-production"
"""The published link key of the local demo: refused outside demo mode."""


class LinkCheck(StrEnum):
    VALID = "valid"
    EXPIRED = "expired"
    FORGED = "forged"
    """Not signed with the key (altered, or made up)."""


@dataclass(frozen=True)
class SignedLink:
    path: str
    recipient: str
    expires_at: datetime

    def query(self, key: str) -> str:
        expires = int(self.expires_at.timestamp())
        signature = _signature(key, self.path, self.recipient, expires)
        return urlencode({"to": self.recipient, "exp": str(expires), "sig": signature})

    def url(self, base_url: str, key: str) -> str:
        return f"{base_url.rstrip('/')}{self.path}?{self.query(key)}"


def check_link(key: str, path: str, recipient: str, expires: str, signature: str, now: datetime) -> LinkCheck:
    """Whether the query a link came with (``to``, ``exp``, ``sig``) was signed for
    ``path`` with ``key``, and whether it still holds at ``now``."""
    if not expires.isdigit() or len(expires) > 12:
        return LinkCheck.FORGED
    expected = _signature(key, path, recipient, int(expires))
    if not hmac.compare_digest(expected, signature):
        return LinkCheck.FORGED
    if datetime.fromtimestamp(int(expires), timezone.utc) <= now:
        return LinkCheck.EXPIRED
    return LinkCheck.VALID


def _signature(key: str, path: str, recipient: str, expires: int) -> str:
    message = "\n".join((path, recipient, str(expires))).encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()
