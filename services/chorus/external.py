"""Calls to systems outside Chorus, with failures mapped onto the error taxonomy.

- connection refused/reset, timeouts, 429 and 5xx  -> TransientError (Retry-After honoured)
- 401 and 403                                       -> PersistentError (bad credentials)
- any other 4xx                                     -> ExternalRejection (a PersistentError the
                                                       caller may turn into a business event)
"""

from __future__ import annotations

from typing import Any

import httpx

from chorus.errors import PersistentError, TransientError
from chorus.faults import fault_point


class ExternalRejection(PersistentError):
    """The other side understood the request and said no (4xx other than auth)."""

    def __init__(self, message: str, status: int, body: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def call_json(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    what: str,
    json: Any = None,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> httpx.Response:
    """Send one request; return the 2xx response or raise the matching taxonomy error.

    ``mid_external_call`` (fault injection) fires after the other side answered and
    before the caller records the answer: the hardest moment to crash.
    """
    try:
        response = await client.request(
            method, url, json=json, content=content, headers=headers, timeout=timeout_s
        )
    except httpx.TimeoutException as exc:
        raise TransientError(f"{what}: timed out after {timeout_s}s ({url})") from exc
    except httpx.TransportError as exc:
        raise TransientError(f"{what}: {type(exc).__name__} calling {url}: {exc}") from exc
    fault_point("mid_external_call")
    status = response.status_code
    if status == 429 or status >= 500:
        raise TransientError(f"{what}: {url} answered {status}", retry_after_s=_retry_after(response))
    if status in (401, 403):
        raise PersistentError(f"{what}: {url} refused our credentials ({status})")
    if status >= 400:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text[:500]
        raise ExternalRejection(f"{what}: {url} rejected the request ({status}): {body}", status, body)
    return response
