"""Wiring: the console's app (pages, static files, /health, /metrics), its session cookie
and its API clients. Nothing connects at import time."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from starlette.exceptions import HTTPException as StarletteHTTPException

from chorus.web.http import api_client
from console.adapters.apis import ApiProblem, Apis, ApiUnavailable
from console.adapters.cookies import COOKIE, SessionCookies
from console.config import Settings
from console.domain import anonymous, still_valid
from console.handlers import CsrfRefused, SignInRequired, render_page, routes

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


def create_app(settings: Settings, apis: Apis) -> FastAPI:
    app = FastAPI(title="Chorus console", docs_url=None, redoc_url=None, openapi_url=None)
    templates = Jinja2Templates(directory=HERE / "templates")
    cookies = SessionCookies(settings.session_key.get_secret_value())
    metrics = CollectorRegistry()
    ProcessCollector(registry=metrics)
    GCCollector(registry=metrics)
    PlatformCollector(registry=metrics)
    requests = Counter("chorus_console_requests", "Pages served", ["method", "status"], registry=metrics)
    latency = Histogram("chorus_console_request_seconds", "Time to answer a page", registry=metrics)

    @app.middleware("http")
    async def sessions(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
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
        requests.labels(request.method, str(response.status_code)).inc()
        latency.observe(time.monotonic() - started)
        return response

    def error_page(request: Request, status: int, title: str, detail: str) -> HTMLResponse:
        return render_page(templates, request, "error.html", status, title=title, detail=detail)

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, exc: SignInRequired) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/signin?next={quote(target, safe='')}", status_code=303)

    @app.exception_handler(CsrfRefused)
    async def _csrf(request: Request, exc: CsrfRefused) -> Response:
        return error_page(
            request,
            403,
            "Form expired",
            "This form is from an earlier session. Go back, reload the page and try again.",
        )

    @app.exception_handler(ApiProblem)
    async def _refused(request: Request, exc: ApiProblem) -> Response:
        if exc.status == 401:
            request.state.sign_out = True
            return RedirectResponse("/signin", status_code=303)
        status = exc.status if exc.status in (400, 403, 404, 409, 410, 422) else 400
        return error_page(request, status, exc.title, exc.detail)

    @app.exception_handler(ApiUnavailable)
    async def _unavailable(request: Request, exc: ApiUnavailable) -> Response:
        return error_page(request, 503, "Service unavailable", f"{exc} Try again in a moment.")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "request"
        return error_page(request, 422, "Check the form", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        return error_page(
            request, exc.status_code, "Not found" if exc.status_code == 404 else "Refused", str(exc.detail)
        )

    # Liveness and readiness are the same here: the console keeps nothing and calls the
    # APIs on each request, so answering at all is both.
    @app.get("/health", include_in_schema=False)
    @app.get("/health/live", include_in_schema=False)
    @app.get("/health/ready", include_in_schema=False)
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok", "service": "console"})

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        return Response(generate_latest(metrics), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(routes(settings, apis, templates))
    return app


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
