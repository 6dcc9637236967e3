"""The trace context each hop carries, with and without a span exporter."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chorus.base import tracing
from chorus.base.tracing import TraceContext, handling_span
from chorus.observability import tracing as exporters
from chorus.observability.tracing import OtelSpans, TracingConfigError, setup_tracing

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_without_an_exporter_a_hop_keeps_the_trace_and_gets_a_new_span_id() -> None:
    assert tracing._spans is None  # nothing in the unit tests configures an exporter
    with handling_span("svc", "thing.happened", PARENT, {}) as traceparent:
        child = TraceContext.parse(traceparent)
    assert child is not None
    assert child.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert child.span_id != "00f067aa0ba902b7"


def test_a_missing_or_broken_parent_starts_a_new_trace() -> None:
    with handling_span("svc", "thing.happened", "garbage", {}) as traceparent:
        assert TraceContext.parse(traceparent) is not None


def test_with_an_exporter_the_emitted_traceparent_names_the_exported_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    monkeypatch.setattr(tracing, "_spans", OtelSpans(provider.get_tracer("test")))
    with handling_span("svc", "thing.happened", PARENT, {"workflow.id": "wf-1"}) as traceparent:
        pass
    (span,) = exported.get_finished_spans()
    assert span.name == "svc handle thing.happened"
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert traceparent == f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-01"
    assert span.attributes == {"workflow.id": "wf-1"}


def test_an_unknown_exporter_is_refused_by_name() -> None:
    with pytest.raises(TracingConfigError, match="'jaeger' is not supported; use one of none, console"):
        setup_tracing("svc", "1", exporter="jaeger")
    assert exporters._provider is None and tracing._spans is None
