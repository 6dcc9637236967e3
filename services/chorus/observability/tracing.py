"""Spans to somewhere: the OpenTelemetry SDK and its exporter, installed once per process.

The kernel carries the W3C trace context on every event whether or not spans are built
(chorus.base.tracing); with an exporter, each handling, request and outbound call is a
span a trace viewer shows hop by hop.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, TraceFlags

from chorus.base.tracing import Attributes, SpanKind, TraceContext, build_spans, child_traceparent

_provider: TracerProvider | None = None

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
    build_spans(OtelSpans(trace.get_tracer("chorus.runtime")))


KINDS = {
    "internal": trace.SpanKind.INTERNAL,
    "server": trace.SpanKind.SERVER,
    "client": trace.SpanKind.CLIENT,
    "consumer": trace.SpanKind.CONSUMER,
    "producer": trace.SpanKind.PRODUCER,
}


class OtelSpans:
    """The kernel's spans as OpenTelemetry spans of ``tracer``."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    @contextmanager
    def span(
        self, name: str, parent: str | None, kind: SpanKind, attributes: Attributes, links: Sequence[str] = ()
    ) -> Iterator[str]:
        with self.tracer.start_as_current_span(
            name, context=_remote(parent), kind=KINDS[kind], attributes=attributes, links=_links(links)
        ) as span:
            yield _span_traceparent(span, parent or "")

    def annotate(self, attributes: Attributes) -> None:
        trace.get_current_span().set_attributes(attributes)

    def record(
        self,
        name: str,
        parent: str | None,
        kind: SpanKind,
        attributes: Attributes,
        start_ns: int,
        end_ns: int,
    ) -> None:
        span = self.tracer.start_span(
            name, context=_remote(parent), kind=KINDS[kind], attributes=attributes, start_time=start_ns
        )
        span.end(end_time=end_ns)


def link(traceparents: Iterable[str]) -> None:
    """Link the span of the event being handled to the spans ``traceparents`` name: the
    other causes of a fan-in, known only once its handler ran (the span began with the
    event that closed it). A no-op while no span is recording (no exporter)."""
    span = trace.get_current_span()
    for found in _links(list(traceparents)):
        span.add_link(found.context)


def _links(traceparents: Sequence[str]) -> list[Link]:
    """Links to the spans ``traceparents`` name (the other causes of a fan-in)."""
    found = []
    for traceparent in traceparents:
        context = _remote(traceparent)
        if context is not None:
            found.append(Link(trace.get_current_span(context).get_span_context()))
    return found


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
