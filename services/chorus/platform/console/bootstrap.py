"""Wiring: the console's app (pages, static files, /health, /metrics), its session cookie
and its API clients. Nothing connects at import time."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from chorus.base.metrics import process_registry
from chorus.platform.console.adapters.apis import ApiProblem, Apis, ApiUnavailable
from chorus.platform.console.adapters.cookies import COOKIE, SessionCookies
from chorus.platform.console.config import Settings
from chorus.platform.console.domain import anonymous, still_valid
from chorus.platform.console.handlers import ConsoleDeps, CsrfRefused, SignInRequired, render_page
from chorus.platform.console.pages import ROUTERS
from chorus.web.http import api_client
from chorus.web.webapi import Problem, plain_parameters

HERE = Path(__file__).parent
SECURITY_HEADERS = {
    # Scripts and styles from this site only (htmx is served from /static); no framing; a
    # link's signature never leaks to another site through Referer.
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
        "form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class PageMetrics:
    """The console's own Prometheus registry: pages served and time to answer, with the
    process, GC and platform collectors."""

    registry: CollectorRegistry
    requests: Counter
    latency: Histogram

    @classmethod
    def create(cls) -> PageMetrics:
        registry = process_registry()
        return cls(
            registry,
            Counter("chorus_console_requests", "Pages served", ["method", "status"], registry=registry),
            Histogram("chorus_console_request_seconds", "Time to answer a page", registry=registry),
        )


def create_app(settings: Settings, apis: Apis) -> FastAPI:
    # Query and path parameters as strict as every API's (no NUL, none over-long): refused
    # here with a page naming them, never passed on for an API to refuse.
    app = FastAPI(
        title="Chorus console",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(plain_parameters)],
    )
    templates = Jinja2Templates(directory=HERE / "templates")
    app.state.console = ConsoleDeps(settings, apis, templates)
    app.state.metrics = PageMetrics.create()
    app.state.cookies = SessionCookies(settings.session_key.get_secret_value())
    app.middleware("http")(sessions)
    for error, answer in ERROR_PAGES.items():
        app.add_exception_handler(error, answer)
    app.include_router(probes)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    for router in ROUTERS:
        app.include_router(router)
    return app


async def sessions(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Each request's session, from its sealed cookie (signed out when idle or too old),
    sealed again into the answer; the security headers; the page metrics."""
    settings: Settings = request.app.state.console.settings
    cookies: SessionCookies = request.app.state.cookies
    metrics: PageMetrics = request.app.state.metrics
    started = time.monotonic()
    opened = cookies.open(request.cookies.get(COOKIE)) or anonymous()
    request.state.session = still_valid(
        opened, datetime.now().astimezone(), settings.idle_timeout_s, settings.session_max_s
    )
    request.state.sign_out = False
    response = await call_next(request)
    if not request.url.path.startswith(("/static/", "/health", "/metrics")):
        session = anonymous() if request.state.sign_out else request.state.session
        response.set_cookie(
            COOKIE,
            cookies.seal(session),
            httponly=True,
            secure=settings.cookies_secure,
            samesite="lax",
            path="/",
        )
        response.headers["Cache-Control"] = "no-store"
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    metrics.requests.labels(request.method, str(response.status_code)).inc()
    metrics.latency.observe(time.monotonic() - started)
    return response


def error_page(request: Request, status: int, title: str, detail: str) -> HTMLResponse:
    return render_page(
        request.app.state.console.templates, request, "error.html", status, title=title, detail=detail
    )


async def _sign_in(request: Request, exc: Exception) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/signin?next={quote(target, safe='')}", status_code=303)


async def _csrf(request: Request, exc: Exception) -> Response:
    return error_page(
        request,
        403,
        "Form expired",
        "This form is from an earlier session. Go back, reload the page and try again.",
    )


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiProblem)
    if exc.status == 401:
        request.state.sign_out = True
        return RedirectResponse("/signin", status_code=303)
    status = exc.status if exc.status in (400, 403, 404, 409, 410, 422) else 400
    return error_page(request, status, exc.title, exc.detail)


async def _parameter(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return error_page(request, exc.status, exc.title, exc.detail)


async def _unavailable(request: Request, exc: Exception) -> Response:
    return error_page(request, 503, "Service unavailable", f"{exc} Try again in a moment.")


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "request"
    return error_page(request, 422, "Check the form", f"{where}: {first.get('msg', 'invalid')}")


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    return error_page(
        request, exc.status_code, "Not found" if exc.status_code == 404 else "Refused", str(exc.detail)
    )


ERROR_PAGES: dict[type[Exception], Callable[[Request, Exception], Awaitable[Response]]] = {
    SignInRequired: _sign_in,
    CsrfRefused: _csrf,
    ApiProblem: _refused,
    ApiUnavailable: _unavailable,
    Problem: _parameter,
    RequestValidationError: _invalid,
    StarletteHTTPException: _http,
}
"""What the person sees when a page cannot be shown: a page saying why (or sign-in)."""

probes = APIRouter()


# Liveness and readiness are the same here: the console keeps nothing and calls the
# APIs on each request, so answering at all is both.
@probes.get("/health", include_in_schema=False)
@probes.get("/health/live", include_in_schema=False)
@probes.get("/health/ready", include_in_schema=False)
async def health() -> JSONResponse:
    return JSONResponse({"status": "ok", "service": "console"})


@probes.get("/metrics", include_in_schema=False)
async def prometheus(request: Request) -> Response:
    metrics: PageMetrics = request.app.state.metrics
    return Response(generate_latest(metrics.registry), media_type="text/plain; version=0.0.4; charset=utf-8")


@asynccontextmanager
async def bootstrap(settings: Settings) -> AsyncIterator[FastAPI]:
    async with api_client(timeout=settings.api_timeout_s) as client:
        apis = Apis(
            client,
            gateway=settings.gateway_url,
            deadletters=settings.deadletter_url,
            analytics=settings.analytics_url,
            notifier=settings.notifier_url,
        )
        yield create_app(settings, apis)
