"""Calls to systems outside Chorus, with failures mapped onto the error taxonomy.

- connection refused/reset, timeouts, 429 and 5xx  -> TransientError (Retry-After honoured)
- 401 and 403                                       -> PersistentError (bad credentials)
- any other 4xx                                     -> ExternalRejection (a PersistentError the
                                                       caller may turn into a business event)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from chorus.base.errors import PersistentError, TransientError
from chorus.base.faults import fault_point
from chorus.base.logs import redact
from chorus.base.tracing import Attributes, annotate, building, outbound_span
from chorus.outside.egress import pin
from chorus.outside.ratelimit import RateLimitedError


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


_FRAMING = {"content-encoding", "content-length", "transfer-encoding"}


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
    max_response_bytes: int = 4 * 1024 * 1024,
    convention: Convention | None = None,
    on_chunk: Callable[[bytes], Awaitable[None]] | None = None,
) -> httpx.Response:
    """Send one request; return the 2xx response or raise the matching taxonomy error.

    The call is a client span (HTTP's attributes, and ``convention``'s when another one
    describes it: a model's chat is GenAI's).

    ``submitter_url``: the URL came from a submitter (a callback, a source, a delivery
    target), so its failures are the input's, not the service's: they are retried and
    dead-lettered as usual but never count towards the dead-letter guard. Such a URL must
    lead outside the deployment's network (chorus.outside.egress), and what its server answers
    beyond a status stays out of error messages. Every answer is capped at
    ``max_response_bytes``.

    ``mid_external_call`` (fault injection) fires after the other side answered and
    before the caller records the answer: the hardest moment to crash.

    ``on_chunk``: each piece of a 2xx answer's body as it arrives (a streamed answer read
    while it is written); the whole body is still the response's.
    """
    named, described = (convention.name, convention.attributes) if convention else ("", None)
    with outbound_span(what, method, urlsplit(url).hostname or "", named, described) as traceparent:
        response = await _call(
            client,
            method,
            url,
            what=what,
            json=json,
            content=content,
            headers={**(headers or {}), **({"traceparent": traceparent} if traceparent else {})},
            params=params,
            timeout_s=timeout_s,
            submitter_url=submitter_url,
            max_response_bytes=max_response_bytes,
            on_chunk=on_chunk,
        )
        more = convention.answered(response) if convention else {}
        if building():
            annotate({"http.response.status_code": response.status_code, **more})
        return response


@dataclass(frozen=True)
class Convention:
    """What a convention beyond HTTP's says of a call: its span's name and attributes, and
    those its answer adds (``answered``, called on every answer: it may count it too)."""

    name: str
    attributes: Attributes
    answered: Callable[[httpx.Response], Attributes] = lambda _: {}


async def _call(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    what: str,
    json: Any,
    content: bytes | None,
    headers: dict[str, str],
    params: dict[str, str] | None,
    timeout_s: float,
    submitter_url: bool,
    max_response_bytes: int,
    on_chunk: Callable[[bytes], Awaitable[None]] | None = None,
) -> httpx.Response:
    blame = submitter_url
    shown = redact(url)  # messages reach logs and timelines: never a URL's credentials
    safe_headers = {k: header_value(v) for k, v in headers.items()}
    target, extensions = url, {}
    if submitter_url:
        # Never into the deployment's own network (SSRF): connect to the address checked.
        pinned = await pin(url)
        target, safe_headers["Host"] = pinned.url, pinned.host_header
        extensions = {"sni_hostname": pinned.sni_hostname} if pinned.sni_hostname else {}
    try:
        async with client.stream(
            method,
            target,
            json=json,
            content=content,
            headers=safe_headers,
            params=params,
            timeout=timeout_s,
            extensions=extensions,
        ) as streamed:
            sink = on_chunk if streamed.status_code < 400 else None
            body = await _read_at_most(streamed, max_response_bytes, f"{what}: {shown}", blame, sink)
            # The body is already decoded (gzip, br): its headers must not say otherwise.
            kept = [(k, v) for k, v in streamed.headers.multi_items() if k.lower() not in _FRAMING]
            response = httpx.Response(
                streamed.status_code, headers=kept, content=body, request=streamed.request
            )
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:  # retrying cannot help
        raise _blamed(PersistentError(f"{what}: cannot call {shown!r}: {exc}"), blame) from exc
    except httpx.TimeoutException as exc:
        raise TransientError(
            f"{what}: timed out after {timeout_s}s ({shown})", caused_by_input=blame
        ) from exc
    except httpx.TransportError as exc:
        raise TransientError(
            f"{what}: {type(exc).__name__} calling {shown}: {redact(str(exc))}", caused_by_input=blame
        ) from exc
    fault_point("mid_external_call")
    status = response.status_code
    if status == 429:
        raise RateLimitedError(
            f"{what}: {shown} answered {status}", retry_after_s=_retry_after(response), caused_by_input=blame
        )
    if status >= 500:
        raise TransientError(
            f"{what}: {shown} answered {status}", retry_after_s=_retry_after(response), caused_by_input=blame
        )
    if status in (401, 403):
        raise _blamed(PersistentError(f"{what}: {shown} refused our credentials ({status})"), blame)
    if status >= 400:
        try:
            answer: Any = response.json()
        except ValueError:
            answer = response.text[:500]
        # A submitter's server's words stay out of the message (it reaches timelines): the
        # status says enough, and the body stays on the exception for the handler.
        said = "" if submitter_url else f": {answer}"
        rejection = ExternalRejection(
            f"{what}: {shown} rejected the request ({status}){said}", status, answer
        )
        raise _blamed(rejection, blame)
    return response


async def _read_at_most(
    response: httpx.Response,
    limit: int,
    what: str,
    blame: bool,
    on_chunk: Callable[[bytes], Awaitable[None]] | None = None,
) -> bytes:
    """The body, refused (not retried) once it passes ``limit`` bytes: a server must not
    be able to fill this process's memory."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise _blamed(PersistentError(f"{what} answered more than {limit:,} bytes"), blame)
        chunks.append(chunk)
        if on_chunk is not None:
            await on_chunk(chunk)
    return b"".join(chunks)


def _blamed(error: PersistentError, caused_by_input: bool) -> PersistentError:
    error.caused_by_input = caused_by_input
    return error
