"""Who is calling: one API-key scheme for every Chorus HTTP API.

Every API (the gateway, dead letters, the audit projection, analytics) reads the same
``CHORUS_API_KEYS`` (JSON: key -> ``{"principal", "role", "tier"?}``) and admits a
caller by ``Authorization: Bearer <key>`` (or ``X-API-Key``): 401 without a known key,
403 when its role may not do what it asks. The principal, never a body field, is who
acted (a redrive's actor, an erasure's requester).

Roles:

- ``submitter`` submits workflows and reads its own;
- ``reviewer`` (with a ``tier``) decides the approvals of its tier;
- ``operator`` runs the system: redrives and discards dead letters, erases, replays;
- ``auditor`` reads everything and changes nothing;
- ``service`` is another Chorus service (the gateway reading the audit projection).

``/health`` and ``/metrics`` are not behind a key: probes and Prometheus must reach
them, and they carry no workflow data. They are on each service's internal HTTP port
(bound to 127.0.0.1 unless configured), never on a public one.
"""

# No ``from __future__ import annotations``: role() builds a dependency whose annotation
# names a closure variable, which FastAPI could not resolve from a string.
import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from chorus.base.settings import ChorusSettings
from chorus.web.webapi import Problem

Role = Literal["submitter", "reviewer", "operator", "auditor", "service"]


class ApiKey(BaseModel):
    """Who a key belongs to and what it may do."""

    principal: str
    role: Role
    tier: str | None = None
    """Reviewer tier (e.g. manager, director, editor); reviewers act only on their tier."""


DEMO_GATEWAY_KEY = "demo-gateway-key"
"""What the gateway presents to the audit projector's read API in the demo."""
DEMO_KEYS = {
    "demo-submitter-key": ApiKey(principal="demo-submitter", role="submitter"),
    "demo-manager-key": ApiKey(principal="dana.manager", role="reviewer", tier="manager"),
    "demo-director-key": ApiKey(principal="erin.director", role="reviewer", tier="director"),
    "demo-editor-key": ApiKey(principal="lee.editor", role="reviewer", tier="editor"),
    "demo-operator-key": ApiKey(principal="sam.operator", role="operator"),
    "demo-auditor-key": ApiKey(principal="ava.auditor", role="auditor"),
    DEMO_GATEWAY_KEY: ApiKey(principal="gateway", role="service"),
}
"""Published keys of the local demo: refused outside ``CHORUS_ENV=demo``."""


class ApiKeySettings(ChorusSettings):
    """Settings of a service that serves an API (mixed into its ``Settings``)."""

    api_keys: dict[str, ApiKey] = DEMO_KEYS
    """API key -> principal (CHORUS_API_KEYS). The demo keys are for local use only."""

    def demo_secrets(self) -> list[str]:
        found = super().demo_secrets()
        if DEMO_KEYS.keys() & self.api_keys.keys():
            found.append("CHORUS_API_KEYS (holds the demo keys)")
        return found


_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`")
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="An API key")


async def presented_key(
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)] = None,
    x_api_key: Annotated[str | None, Security(_api_key_header)] = None,
) -> str:
    """The key sent in ``Authorization: Bearer <key>`` or ``X-API-Key`` ("" when none)."""
    return x_api_key or (bearer.credentials if bearer else "")


async def caller(request: Request, presented: Annotated[str, Depends(presented_key)]) -> ApiKey:
    """The caller, by the app's keys (``app.state.api_keys``); 401 otherwise."""
    return known_key(request.app.state.api_keys, presented)


def known_key(keys: Mapping[str, ApiKey], presented: str) -> ApiKey:
    if not presented:
        raise Problem(
            401,
            "Unauthorized",
            "missing API key: send Authorization: Bearer <key>",
            headers={"WWW-Authenticate": "Bearer"},
        )
    found = None
    for key, who in keys.items():
        # Every key is compared (in constant time), so the answer's timing says nothing.
        if hmac.compare_digest(key.encode(), presented.encode("utf-8", "surrogateescape")):
            found = who
    if found is None:
        raise Problem(401, "Unauthorized", "unknown API key", headers={"WWW-Authenticate": "Bearer"})
    return found


def role(*allowed: Role, who: Callable[..., Awaitable[ApiKey]] = caller) -> Any:
    """A dependency admitting only callers with one of ``allowed`` roles (403 otherwise);
    ``who`` finds the caller (the gateway's also applies its rate limit)."""

    async def check(found: Annotated[ApiKey, Depends(who)]) -> ApiKey:
        if found.role not in allowed:
            raise Problem(403, "Forbidden", f"{found.role} may not do this (needs {' or '.join(allowed)})")
        return found

    return check


def bearer(key: str) -> dict[str, str]:
    """The request header presenting ``key``."""
    return {"Authorization": f"Bearer {key}"}
