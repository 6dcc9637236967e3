"""The trace context each hop carries, with and without a span exporter; with one, spans
by OpenTelemetry's conventions (messaging.* on consuming and publishing, gen_ai.* on a
model's chat), which every tracing backend reads."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from chorus.base import tracing
from chorus.base.metrics import Metrics
from chorus.base.tracing import TraceContext, handling_span
from chorus.contracts.base import EventModel
from chorus.kernel.messaging import Delivery, published
from chorus.llm import AgentLoop, ChatMessage, Tool, ToolContext
from chorus.observability import tracing as exporters
from chorus.observability.tracing import TracingConfigError, setup_tracing
from chorus.outside.llm import usage
from chorus.outside.llm.client import OpenAICompatibleLLM

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
EVENT_ID = "7d0c3b43-6a07-4a3f-8d1e-3c4a1b2e9f10"
DELIVERY = Delivery("approvals.events", 2, 41, "approval_gate", EVENT_ID, "wf-1")


def test_without_an_exporter_a_hop_keeps_the_trace_and_gets_a_new_span_id() -> None:
    assert tracing._spans is None  # nothing in the unit tests configures an exporter
    with handling_span(DELIVERY.span_name, PARENT, DELIVERY.attributes()) as traceparent:
        child = TraceContext.parse(traceparent)
    assert child is not None
    assert child.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert child.span_id != "00f067aa0ba902b7"


def test_a_missing_or_broken_parent_starts_a_new_trace() -> None:
    with handling_span(DELIVERY.span_name, "garbage", {}) as traceparent:
        assert TraceContext.parse(traceparent) is not None


def test_with_an_exporter_handling_is_a_consumer_span_the_emitted_traceparent_names(
    exported: InMemorySpanExporter,
) -> None:
    attributes = {**DELIVERY.attributes(), "chorus.workflow_id": "wf-1"}
    with handling_span(DELIVERY.span_name, PARENT, attributes) as traceparent:
        pass
    (span,) = exported.get_finished_spans()
    assert (span.name, span.kind) == ("process approvals.events", SpanKind.CONSUMER)
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert traceparent == f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-01"
    assert span.attributes == {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "approvals.events",
        "messaging.destination.partition.id": "2",
        "messaging.kafka.offset": 41,
        "messaging.consumer.group.name": "approval_gate",
        "messaging.message.id": EVENT_ID,
        "messaging.kafka.message.key": "wf-1",
        "chorus.workflow_id": "wf-1",
    }


def test_a_published_event_is_a_producer_span_of_the_span_that_emitted_it(
    exported: InMemorySpanExporter,
) -> None:
    name, attributes = published("workflows.lifecycle", "e-1", 4, 99)
    tracing.ended_span(name, PARENT, "producer", attributes, 1_000, 5_000)
    (span,) = exported.get_finished_spans()
    assert (span.name, span.kind) == ("send workflows.lifecycle", SpanKind.PRODUCER)
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert (span.start_time, span.end_time) == (1_000, 5_000)
    assert span.attributes is not None
    assert span.attributes["messaging.operation.type"] == "send"
    assert span.attributes["messaging.destination.name"] == "workflows.lifecycle"
    assert span.attributes["messaging.kafka.offset"] == 99


async def test_a_models_chat_is_a_gen_ai_client_span_with_the_tokens_it_used(
    exported: InMemorySpanExporter,
) -> None:
    def model(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "id": "chatcmpl-1",
                "model": "small-2",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
            },
        )

    before = tokens_counted()
    async with httpx.AsyncClient(transport=httpx.MockTransport(model)) as client:
        llm = OpenAICompatibleLLM(client, base_url="http://llm.test/v1", model="small")
        with handling_span(DELIVERY.span_name, PARENT, {}):
            assert await llm.complete([ChatMessage("user", "task: x")]) == "{}"
    chat = next(s for s in exported.get_finished_spans() if s.kind == SpanKind.CLIENT)
    assert chat.name == "chat small"
    assert chat.attributes is not None
    assert {k: v for k, v in chat.attributes.items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "small",
        "gen_ai.request.temperature": 0.0,
        "gen_ai.response.model": "small-2",
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
    }
    assert chat.attributes["http.response.status_code"] == 200
    counted = tokens_counted()
    assert counted["input"] - before.get("input", 0) == 12
    assert counted["output"] - before.get("output", 0) == 3


async def test_an_agent_loop_is_chat_spans_and_execute_tool_spans_under_the_handling(
    exported: InMemorySpanExporter,
) -> None:
    """A loop of two turns (a tool call, then the answer): each model turn a gen_ai chat span
    with its tokens, the tool call an execute_tool span between them, all in the step's trace."""
    turns = iter(
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "function": {"name": "add", "arguments": '{"a": 2}'}}],
            },
            {"role": "assistant", "content": "3"},
        ]
    )

    def model(request: httpx.Request) -> httpx.Response:
        body = {
            "model": "small",
            "choices": [{"message": next(turns)}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1},
        }
        return httpx.Response(200, json=body)

    class Add(BaseModel):
        a: int

    async def add(args: Add, call: ToolContext) -> int:
        return args.a + 1

    class Kept:
        async def checkpoint(self, state: BaseModel, *, emit: Sequence[EventModel] = ()) -> None:
            pass

        def idempotency_key(self, *parts: str) -> str:
            return ":".join(parts)

    async with httpx.AsyncClient(transport=httpx.MockTransport(model)) as client:
        llm = OpenAICompatibleLLM(client, base_url="http://llm.test/v1", model="small")
        loop = AgentLoop(llm, [Tool("add", "add one", Add, add)])
        with handling_span(DELIVERY.span_name, PARENT, {}):
            done = await loop.run(Kept(), [{"role": "user", "content": "2+1?"}], None, keep=lambda t: t)
    assert done.answer == "3"
    spans = sorted(exported.get_finished_spans(), key=lambda s: s.start_time or 0)
    handled = next(s for s in spans if s.kind == SpanKind.CONSUMER)
    named = [
        (s.name, (s.attributes or {}).get("gen_ai.usage.input_tokens")) for s in spans if s is not handled
    ]
    assert named == [("chat small", 5), ("execute_tool add", None), ("chat small", 5)]
    tool = next(s for s in spans if s.name == "execute_tool add")
    assert tool.attributes is not None and tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert all(
        s.parent is not None and s.parent.span_id == handled.context.span_id
        for s in spans
        if s is not handled
    )


def tokens_counted() -> dict[str, float]:
    """gen_ai_client_token_usage's sums for the model "small", by token type."""
    metrics = Metrics("test")
    metrics.registry.register(usage.TokenUsageCollector())
    return {
        s.labels["gen_ai_token_type"]: s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if s.name == "gen_ai_client_token_usage_sum" and s.labels["gen_ai_request_model"] == "small"
    }


def test_an_unknown_exporter_is_refused_by_name() -> None:
    with pytest.raises(TracingConfigError, match="'jaeger' is not supported; use one of none, console"):
        setup_tracing("svc", "1", exporter="jaeger")
    assert exporters._provider is None and tracing._spans is None
