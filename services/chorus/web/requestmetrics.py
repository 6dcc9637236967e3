"""OpenTelemetry's HTTP server metrics, in Prometheus form, for every API a service serves:
``http_server_request_duration_seconds`` (``http.server.request.duration``) by method, route
and status, and ``http_server_active_requests``. The labels are bounded whatever callers send:
the route is the matched route's template (``/v1/workflows/{workflow_id}``; empty when no route
matched), a method HTTP does not define is ``_OTHER``, as the conventions say. An API's SLO
(share of requests answered under a second without a 5xx) is a query on these."""

from __future__ import annotations

import time
import weakref

from prometheus_client import CollectorRegistry, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chorus.base.metrics import Metrics

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
"""HTTP's methods: any other is counted as ``_OTHER`` (a caller cannot add series)."""


DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
"""OpenTelemetry's advice for http.server.request.duration."""


class HttpServerMetrics:
    """The two instruments, once per registry (a process may serve two APIs: the gateway's
    public one beside /health and /metrics)."""

    _of: weakref.WeakKeyDictionary[CollectorRegistry, HttpServerMetrics] = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            "http_server_request_duration_seconds",
            "Duration of HTTP server requests, by method, route template and status",
            ["http_request_method", "http_route", "http_response_status_code"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.active = Gauge(
            "http_server_active_requests",
            "HTTP server requests in flight, by method",
            ["http_request_method"],
            registry=registry,
        )

    @classmethod
    def of(cls, registry: CollectorRegistry) -> HttpServerMetrics:
        found = cls._of.get(registry)
        if found is None:
            found = cls._of[registry] = cls(registry)
        return found


class RequestMetrics:
    """ASGI middleware, outermost: it sees every answer, a 413 of the body cap's too."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = HttpServerMetrics.of(metrics.registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in METHODS else "_OTHER"
        status = 500  # what the server answers when the app fails before it answers

        async def answering(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        active = self.metrics.active.labels(method)
        active.inc()
        started = time.perf_counter()  # a duration, not the time: the clock of the process
        try:
            await self.app(scope, receive, answering)
        finally:
            active.dec()
            # Routing records the route it matched in the scope (Starlette).
            route = getattr(scope.get("route"), "path", "")
            self.metrics.duration.labels(method, route, str(status)).observe(time.perf_counter() - started)
