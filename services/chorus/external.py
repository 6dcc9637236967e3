"""Calls to systems outside Chorus, with failures mapped onto the error taxonomy.

- connection refused/reset, timeouts, 429 and 5xx  -> TransientError (Retry-After honoured)
- 401 and 403                                       -> PersistentError (bad credentials)
- any other 4xx                                     -> ExternalRejection (a PersistentError the
                                                       caller may turn into a business event)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from chorus.errors import PersistentError, TransientError
from chorus.faults import fault_point


class ExternalRejection(PersistentError):
    """The other side understood the request and said no (4xx other than auth)."""

    def __init__(self, message: str, status: int, body: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def header_value(value: str) -> str:
    """``value`` as an HTTP header may carry it: visible ASCII as is, anything else (a
    German or Japanese word, a control character) percent-encoded as UTF-8. User text
    never reaches the wire unencoded, and never makes the HTTP client raise."""
    if value.isascii() and value.isprintable():
        return value
    return quote(value, safe=" !#$&'()*+,/:;=?@[]~")


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
    params: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    submitter_url: bool = False,
) -> httpx.Response:
    """Send one request; return the 2xx response or raise the matching taxonomy error.

    ``submitter_url``: the URL came from a submitter (a callback, a source, a delivery
    target), so its failures are the input's, not the service's: they are retried and
    dead-lettered as usual but never count towards the dead-letter guard.

    ``mid_external_call`` (fault injection) fires after the other side answered and
    before the caller records the answer: the hardest moment to crash.
    """
    blame = submitter_url
    safe_headers = {k: header_value(v) for k, v in (headers or {}).items()}
    try:
        response = await client.request(
            method, url, json=json, content=content, headers=safe_headers, params=params, timeout=timeout_s
        )
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:  # retrying cannot help
        raise _blamed(PersistentError(f"{what}: cannot call {url!r}: {exc}"), blame) from exc
    except httpx.TimeoutException as exc:
        raise TransientError(f"{what}: timed out after {timeout_s}s ({url})", caused_by_input=blame) from exc
    except httpx.TransportError as exc:
        raise TransientError(
            f"{what}: {type(exc).__name__} calling {url}: {exc}", caused_by_input=blame
        ) from exc
    fault_point("mid_external_call")
    status = response.status_code
    if status == 429 or status >= 500:
        raise TransientError(
            f"{what}: {url} answered {status}", retry_after_s=_retry_after(response), caused_by_input=blame
        )
    if status in (401, 403):
        raise _blamed(PersistentError(f"{what}: {url} refused our credentials ({status})"), blame)
    if status >= 400:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text[:500]
        rejection = ExternalRejection(f"{what}: {url} rejected the request ({status}): {body}", status, body)
        raise _blamed(rejection, blame)
    return response


def _blamed(error: PersistentError, caused_by_input: bool) -> PersistentError:
    error.caused_by_input = caused_by_input
    return error
