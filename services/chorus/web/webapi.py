"""What every Chorus HTTP API (FastAPI) shares: problem+json errors, a body cap, strict JSON.

- Errors are RFC 9457 ``application/problem+json`` naming the failing field with a
  JSON pointer (``/input/document_text``), for every 4xx the API can give.
- A body still arriving after ``body_timeout_s`` is a 408 (a trickling client frees its slot).
- A request body over ``max_body_bytes`` is answered 413 before it is parsed or
  authenticated: at once when it declares its length, as soon as it passes the cap
  when it is streamed.
- A body that is not ``application/json`` is a 415 (no forms, no text/plain).
- Bodies are parsed by :mod:`chorus.contracts.strictjson`: NUL, unpaired surrogates, NaN,
  duplicate names and deep nesting are a 422 naming the field, never a 500 later.
- Query and path parameters get the same strictness (:func:`plain_parameters`): a NUL or a
  value over ``MAX_PARAMETER_CHARS`` is a 400 naming the parameter, whatever the route
  declares; a date-time parameter (:data:`QueryDateTime`) must be one UTC can hold.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Coroutine, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import AfterValidator, AwareDatetime, BeforeValidator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chorus.base.errors import KeyStoreUnavailableError
from chorus.base.metrics import Metrics
from chorus.contracts import strictjson
from chorus.contracts.base import in_utc
from chorus.web.requestmetrics import RequestMetrics

_ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _iso_only(value: Any) -> Any:
    # pydantic also reads a number as seconds since the epoch; a parameter documented as
    # a date-time takes only what the document says.
    if isinstance(value, str) and not _ISO_DATETIME.match(value):
        raise ValueError("expected an ISO 8601 date-time with a time zone, e.g. 2026-12-01T09:00:00Z")
    return value


QueryDateTime = Annotated[AwareDatetime, BeforeValidator(_iso_only), AfterValidator(in_utc)]
"""A date-time query parameter: ISO 8601 with a time zone, nothing else, within the years
1 to 9999 in UTC (``0001-01-01T00:00:00+01:00`` is refused, not a 500 when stored)."""

PROBLEM = "application/problem+json"
DEFAULT_MAX_BODY_BYTES = 1_048_576
DEFAULT_BODY_TIMEOUT_S = 30.0
DRAIN_FACTOR = 8
"""An oversized body is read and discarded up to this many times the cap before the 413."""
MAX_PARAMETER_CHARS = 2048
"""The longest query or path parameter value any route takes (its own limit may be lower)."""


class Problem(Exception):
    """Raise anywhere in a request: answered as problem+json with ``status``."""

    def __init__(
        self, status: int, title: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail, self.extra = status, title, detail, extra
        self.headers = headers


def problem_response(
    status: int,
    title: str,
    detail: str,
    instance: str,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "instance": instance}
    return JSONResponse({**body, **extra}, status_code=status, media_type=PROBLEM, headers=headers)


def pointer(loc: tuple[Any, ...]) -> str:
    return "/" + "/".join(strictjson.escape(str(p)) for p in loc)


# -- problem schema for the OpenAPI document ---------------------------------------------

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"pointer": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
    "required": ["type", "title", "status", "detail"],
}

_DESCRIPTIONS = {
    400: "Bad request",
    401: "Missing or unknown API key",
    403: "The key's role or tier may not do this",
    404: "No such resource",
    405: "Method not allowed",
    406: "Not acceptable",
    408: "The request body did not arrive in time",
    409: "Conflict with the resource's current state",
    413: "Request body larger than the cap",
    415: "Unsupported media type",
    422: "The body, a parameter or a header is invalid; `errors` names each field",
    503: "A service this one depends on is unavailable; retry after a while",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` documenting ``statuses`` as problem+json."""
    return {
        status: {
            "description": _DESCRIPTIONS.get(status, "Problem"),
            "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


# -- plain parameters -------------------------------------------------------------------


def invalid_parameter(name: str, detail: str) -> Problem:
    """The 400 for a query or path parameter, naming it (``parameter``)."""
    return Problem(400, f"Invalid parameter: {name}", detail, parameter=name)


async def plain_parameters(request: Request) -> None:
    """Every query and path parameter of every route, before the route sees it: PostgreSQL
    cannot hold a NUL (it was a 500 wherever a parameter reached a query), and no value is
    longer than :data:`MAX_PARAMETER_CHARS` whether or not its route says so. (Headers are
    checked before any route, in :mod:`chorus.web.heads`.)"""
    for name, value in (*request.path_params.items(), *request.query_params.multi_items()):
        if not isinstance(value, str):
            continue
        if "\x00" in value:
            at = value.index("\x00")
            detail = f"{name} contains a NUL character at character {at}, which cannot be stored"
            raise invalid_parameter(name, detail)
        if len(value) > MAX_PARAMETER_CHARS:
            detail = f"{name} is {len(value):,} characters long; at most {MAX_PARAMETER_CHARS:,}"
            raise invalid_parameter(name, detail)


# -- strict JSON bodies -----------------------------------------------------------------


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = strictjson.loads(body, exact_integers=False)
            except strictjson.StrictJSONError as exc:
                # FastAPI turns a JSONDecodeError into a 422 "json_invalid" error.
                text = body.decode("utf-8", "replace")
                raise json.JSONDecodeError(str(exc), text, exc.position or 0) from None
        return self._json


_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


def _is_json(request: Request) -> bool:
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is read by :mod:`chorus.contracts.strictjson`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            strict_request = StrictJSONRequest(request.scope, request.receive)
            if request.method in _WITH_BODY and await strict_request.body() and not _is_json(request):
                # JSON only: a form or text/plain POST (what a foreign web page can send
                # without a CORS preflight) is refused before anything parses it.
                raise Problem(415, "Unsupported media type", "send the body as application/json")
            return await handler(strict_request)

        return strict


# -- the body cap -------------------------------------------------------------------------


class BodyCap:
    """413 for a body over the cap, before anything else sees the request (routing,
    authentication, parsing): at once when Content-Length says so, else as soon as the
    streamed bytes pass the cap. The body is read here (FastAPI reads it whole anyway)
    and handed on to the app unchanged. Starlette's RequestBodyLimitMiddleware answers
    text/plain and only once the app reads; every answer of ours is problem+json.

    A body that takes longer than ``body_timeout_s`` to arrive (a client trickling bytes
    to hold a connection: the API shares its event loop and connection limit with the
    service) is a 408 and the connection is closed."""

    def __init__(
        self, app: ASGIApp, max_body_bytes: int, body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and not length.isdigit():
            await self._refuse(
                scope, receive, send, 400, "Bad Content-Length", "Content-Length is not a number"
            )
            return
        declared = int(length) if length is not None else None
        if declared is not None and declared > self.max_body_bytes * DRAIN_FACTOR:
            await self._too_large(scope, receive, send)  # not worth reading: closed after
            return
        body = bytearray()
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                detail = f"the body did not arrive within {self.body_timeout_s:g} s"
                await self._refuse(scope, receive, send, 408, "Request timeout", detail)
                return
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= self.max_body_bytes and (declared is None or declared <= self.max_body_bytes):
                body += chunk
            elif size > self.max_body_bytes * DRAIN_FACTOR:
                break  # answer now; the connection is closed after the answer
            if not message.get("more_body", False):
                break
        if size > self.max_body_bytes or (declared is not None and declared > self.max_body_bytes):
            # Read to the end (discarding it) up to a bound, so the client, still sending,
            # is there to read the answer instead of a reset connection.
            await self._too_large(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"the body may be at most {self.max_body_bytes:,} bytes"
        await self._refuse(scope, receive, send, 413, "Content too large", detail)

    @staticmethod
    async def _refuse(
        scope: Scope, receive: Receive, send: Send, status: int, title: str, detail: str
    ) -> None:
        # Connection: close, so a client still sending the rest is not read any further.
        response = problem_response(
            status, title, detail, scope.get("path", ""), headers={"Connection": "close"}
        )
        await response(scope, receive, send)


def api_router(**router_args: Any) -> APIRouter:
    """An APIRouter whose routes read bodies as :func:`create_api`'s do (strict JSON, 415
    for anything but JSON): a plain APIRouter keeps FastAPI's lenient route class even
    when included in such an app."""
    return APIRouter(route_class=StrictJSONRoute, **router_args)


def create_api(
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    metrics: Metrics | None = None,
    **fastapi_args: Any,
) -> FastAPI:
    """A FastAPI app with the shared behaviour above installed; with ``metrics``, every
    request is counted in them (chorus.web.requestmetrics)."""
    dependencies = [Depends(plain_parameters), *fastapi_args.pop("dependencies", ())]
    app = FastAPI(dependencies=dependencies, **fastapi_args)
    app.router.route_class = StrictJSONRoute
    app.add_middleware(BodyCap, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s)
    if metrics is not None:
        app.add_middleware(RequestMetrics, metrics=metrics)  # added last: outermost

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(
            exc.status, exc.title, exc.detail, request.url.path, headers=exc.headers, **exc.extra
        )

    @app.exception_handler(KeyStoreUnavailableError)
    async def _keys_down(request: Request, exc: KeyStoreUnavailableError) -> JSONResponse:
        # Infrastructure, as PostgreSQL being down is: the caller may retry.
        return problem_response(
            503,
            "Service unavailable",
            "the key service did not answer",
            request.url.path,
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_field_error(e) for e in exc.errors()]
        first = errors[0] if errors else {"pointer": "/", "message": "invalid request"}
        return problem_response(
            422, "Invalid request", f"{first['pointer']}: {first['message']}", request.url.path, errors=errors
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = exc.headers
        if exc.status_code == 405:
            # Starlette's Allow names the methods of the first route that matched the path
            # only; every route of that same path template counts (GET and PUT of a resource).
            matched = [r for r in app.router.routes if r.matches(request.scope)[0] != Match.NONE]
            if matched:
                template = getattr(matched[0], "path", None)
                same = [r for r in matched if getattr(r, "path", None) == template]
                allowed = sorted({m for r in same for m in _methods(r)})
                headers = {**(headers or {}), "Allow": ", ".join(allowed)}
        return problem_response(
            exc.status_code, str(exc.detail), str(exc.detail), request.url.path, headers=headers
        )

    original_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            # FastAPI caches the document it returns; the Problem schema joins it once.
            schema = original_openapi()
            schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
            # Every route may answer 400 (plain_parameters runs before each).
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.setdefault("responses", {}).setdefault("400", problems(400)[400])
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _field_error(error: Any) -> dict[str, str]:
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid":
        # Our strict reader's message already names the field ("/input/x: contains NUL ...").
        message = str((error.get("ctx") or {}).get("error") or error.get("msg"))
        where = message.split(": ", 1)[0] if message.startswith("/") else "/"
        return {"pointer": where, "message": message.removeprefix(f"{where}: ")}
    # loc starts with where the value came from (body, query, header, path); the
    # pointer is into that part, except headers and parameters, named as such.
    source, rest = (loc[0], loc[1:]) if loc else ("body", ())
    if source in ("header", "query", "path", "cookie"):
        return {"pointer": f"{source}:{'/'.join(str(p) for p in rest)}", "message": str(error.get("msg"))}
    return {"pointer": pointer(rest), "message": str(error.get("msg"))}


def _methods(route: BaseRoute) -> set[str]:
    methods: set[str] | None = getattr(route, "methods", None)
    return methods or set()
