"""W3C trace context across every hop, and one OpenTelemetry span per handled event.

The ``traceparent`` travels in the envelope and in the Kafka header of the same
name, so tools that only read headers see it too. The trace id set by whoever
produced a workflow's first event stays on every later event of the workflow;
each hop gets a new span id whose parent is the span that handled the cause. A call to a
system outside Chorus (an LLM, the payment provider, a source, a webhook) is a client span
of the handling span, and its request carries that span's ``traceparent`` header, so the
other side's trace joins the workflow's.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    span_id: str
    flags: str = "01"

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    @classmethod
    def parse(cls, traceparent: str | None) -> TraceContext | None:
        match = _TRACEPARENT.match(traceparent or "")
        if not match or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
            return None
        return cls(match.group(1), match.group(2), match.group(3))

    @classmethod
    def new_root(cls) -> TraceContext:
        return cls(secrets.token_hex(16), secrets.token_hex(8))

    def child(self) -> TraceContext:
        return TraceContext(self.trace_id, secrets.token_hex(8), self.flags)


def child_traceparent(parent: str | None) -> str:
    """A new span in the parent's trace, or a new trace when there is no valid parent."""
    ctx = TraceContext.parse(parent)
    return (ctx.child() if ctx else TraceContext.new_root()).traceparent


_provider: TracerProvider | None = None
_handling: ContextVar[str | None] = ContextVar("chorus_handling_traceparent", default=None)
"""The traceparent of the event being handled in this task (its outbound calls' parent)."""

EXPORTERS = ("none", "console", "otlp")


class TracingConfigError(ValueError):
    pass


def setup_tracing(service: str, version: str, exporter: str | None = None) -> None:
    """Install the SDK provider once per process, when spans go somewhere.

    ``exporter`` (default: the standard OTEL_TRACES_EXPORTER variable, else "none"):
    "console" prints spans, "otlp" sends them with opentelemetry-exporter-otlp (install
    it; its own OTEL_EXPORTER_OTLP_* settings apply). With "none" no span is built at
    all: the trace context still travels hop by hop in every event (see handling_span).
    """
    global _provider  # noqa: PLW0603 - one provider per process, set once
    if _provider is not None:
        return
    chosen = (exporter or os.environ.get("OTEL_TRACES_EXPORTER") or "none").strip().lower()
    if chosen not in EXPORTERS:
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER={chosen!r} is not supported; use one of {', '.join(EXPORTERS)}"
        )
    if chosen == "none":
        return
    span_exporter: SpanExporter
    if chosen == "console":
        span_exporter = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
        except ImportError:
            raise TracingConfigError(
                "OTEL_TRACES_EXPORTER=otlp needs the opentelemetry-exporter-otlp-proto-http package"
            ) from None
        span_exporter = OTLPSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service, "service.version": version}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    trace.set_tracer_provider(provider)
    _provider = provider


@cache
def _tracer() -> trace.Tracer:
    # Looked up once: get_tracer builds a new instrumentation scope on every call.
    return trace.get_tracer("chorus.runtime")


@contextmanager
def handling_span(
    service: str, event_type: str, traceparent: str, attributes: dict[str, str]
) -> Iterator[str]:
    """Handle one event as a new span in the trace of ``traceparent``; yields the
    traceparent of the new span, which the runtime puts into every emitted event.

    Without an exporter no span object is built: one nobody reads cost ~15% of a hop's
    CPU (bench profile), and the chain only needs a new span id in the same trace.
    With one, a trace viewer shows the chain hop by hop.
    """
    with _working_span(
        f"{service} handle {event_type}", traceparent, SpanKind.INTERNAL, attributes
    ) as current:
        yield current


@contextmanager
def request_span(service: str, name: str, traceparent: str | None) -> Iterator[str]:
    """A request a service answers that starts work (the gateway accepting a workflow, a
    person's decision) as a span: a child of the caller's ``traceparent``, or the root of a
    new trace. Yields the traceparent of what it publishes."""
    with _working_span(f"{service} {name}", traceparent, SpanKind.SERVER, {}) as current:
        yield current


@contextmanager
def _working_span(
    name: str, traceparent: str | None, kind: SpanKind, attributes: dict[str, str]
) -> Iterator[str]:
    """A span of work in the trace of ``traceparent`` (a new trace without one), current for
    the calls made inside (outbound_span); yields its traceparent."""
    if _provider is None:
        with _handling_as(child_traceparent(traceparent)) as current:
            yield current
        return
    with (
        _tracer().start_as_current_span(
            name, context=_remote(traceparent), kind=kind, attributes=attributes
        ) as span,
        _handling_as(_span_traceparent(span, traceparent or "")) as current,
    ):
        yield current


@contextmanager
def outbound_span(what: str, method: str, url: str) -> Iterator[str | None]:
    """A call outside Chorus, as a client span in the trace of the event being handled;
    yields the ``traceparent`` header to send (None outside a handling: no trace to join)."""
    parent = _handling.get()
    if parent is None:
        yield None
        return
    if _provider is None:
        yield child_traceparent(parent)
        return
    host = urlsplit(url).hostname or ""
    with _tracer().start_as_current_span(
        f"{what} {method}",
        context=_remote(parent),
        kind=SpanKind.CLIENT,
        attributes={"http.request.method": method, "server.address": host, "chorus.call": what},
    ) as span:
        yield _span_traceparent(span, parent)


@contextmanager
def in_trace_of(traceparent: str | None) -> Iterator[None]:
    """Calls made inside join the trace of ``traceparent`` (work done later on behalf of an
    event, e.g. a message the delivery loop sends): their client spans are its children."""
    if TraceContext.parse(traceparent) is None:
        yield
        return
    assert traceparent is not None
    with _handling_as(traceparent):
        yield


@contextmanager
def _handling_as(traceparent: str) -> Iterator[str]:
    token = _handling.set(traceparent)
    try:
        yield traceparent
    finally:
        _handling.reset(token)


def _remote(traceparent: str | None) -> Context | None:
    """The OpenTelemetry context whose parent is the span ``traceparent`` names."""
    parent = TraceContext.parse(traceparent)
    if parent is None:
        return None
    remote = SpanContext(
        trace_id=int(parent.trace_id, 16),
        span_id=int(parent.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(parent.flags, 16)),
    )
    return trace.set_span_in_context(NonRecordingSpan(remote))


def _span_traceparent(span: Span, fallback: str) -> str:
    """The traceparent naming ``span`` (falls back to a child of ``fallback`` when not sampled)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return child_traceparent(fallback)
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
