"""Traces end to end: every service exports its spans over OTLP/HTTP (the ``otlp`` extra) to a
receiver in this test; one procurement workflow is one trace — the gateway accepting it,
every service's handling and publishing, the reviewer's decision, and each call outside (the
language model, the payment provider, the reviewers' channel) — with OpenTelemetry's
messaging, HTTP and GenAI attributes, and the outside systems got the trace's
``traceparent`` header."""

from __future__ import annotations

import gzip
import json
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from chorus.tools.devstack import SERVICES, DevStack, free_port
from tests.support.stacks import own_stack
from tests.support.submissions import procurement
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

SUBMITTER = {"Authorization": "Bearer demo-submitter-key"}
MANAGER = {"Authorization": "Bearer demo-manager-key"}
PROCUREMENT = tuple(s for s in SERVICES if s not in ("report_agent", "source_fetcher"))
HOPS = ("invoice_agent", "budget_agent", "approval_gate", "payment_agent", "notifier", "audit_projector")
SERVER, CLIENT, PRODUCER, CONSUMER = 2, 3, 4, 5
"""OTLP's span kinds."""
PO: dict[str, Any] = {
    "po_number": "PO-TRACE",
    "vendor_id": "vendor-acme",
    "currency": "EUR",
    "total_cents": 10**9,
}


@dataclass
class Receiver:
    """An OTLP/HTTP trace receiver: what every service exported, span by span."""

    url: str
    spans: list[dict[str, Any]] = field(default_factory=list)

    def of_trace(self, trace_id: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["trace_id"] == trace_id]


@pytest.fixture(scope="module")
async def receiver() -> AsyncIterator[Receiver]:
    port = free_port()
    found = Receiver(f"http://127.0.0.1:{port}/v1/traces")

    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    found.spans.append(
                        {
                            "service": attributes.get("service.name"),
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "name": span.name,
                            "kind": span.kind,
                            "attributes": {
                                a.key: getattr(a.value, a.value.WhichOneof("value") or "string_value")
                                for a in span.attributes
                            },
                        }
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield found
    finally:
        await runner.cleanup()


@pytest.fixture(scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str, receiver: Receiver
) -> AsyncIterator[DevStack]:
    tmp = tmp_path_factory.mktemp("otlp")
    # The standard OpenTelemetry settings, nothing of Chorus's own.
    tracing = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    orders = {
        "CHORUS_PURCHASE_ORDERS": json.dumps([{**PO, "cost_center": "cc-trace"}]),
        "CHORUS_BUDGETS": json.dumps({"cc-trace": 10**9}),
    }
    async with own_stack(
        tmp,
        kafka_bootstrap,
        database_url,
        name="otlp",
        services=PROCUREMENT,
        env=tracing,
        service_env={"budget_agent": orders},
    ) as own:
        yield own.stack


async def test_one_workflow_is_one_trace_across_every_service_and_external_call(
    stack: DevStack, receiver: Receiver
) -> None:
    trace_id, root = secrets.token_hex(16), secrets.token_hex(8)
    run = uuid.uuid4().hex[:8]
    submission = procurement(
        run, vendor=PO["vendor_id"], po=PO["po_number"], total="12.40", line="4 x GPU hours @ 3.10 EUR"
    )
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10.0) as http:
        accepted = await http.post(
            "/v1/workflows/procurement",
            json=submission,
            headers={**SUBMITTER, "traceparent": f"00-{trace_id}-{root}-01"},
        )
        assert accepted.status_code == 202, accepted.text
        workflow_id = accepted.json()["workflow_id"]

        async def status() -> dict[str, Any]:
            response = await http.get(f"/v1/workflows/{workflow_id}", headers=SUBMITTER)
            body: dict[str, Any] = response.json()
            return body

        async def waiting() -> dict[str, Any] | None:
            pending = (await status()).get("pending_approval") or {}
            return pending if pending.get("tier") == "manager" else None

        pending = await wait_until(waiting, timeout_s=90, interval_s=0.5, what="the manager's approval")

        async def told() -> bool:  # the reviewers' channel heard of it (the notifier's loop)
            return bool((await stack.sandbox_stats())["slack"])

        await wait_until(told, timeout_s=60, interval_s=0.5, what="the manager tier told on its channel")
        decided = await http.post(
            f"/v1/approvals/{pending['approval_id']}",
            json={"decision": "approve", "comment": "fine"},
            headers=MANAGER,
        )
        assert decided.status_code == 202, decided.text

        async def completed() -> bool:
            return bool((await status())["status"] == "completed")

        await wait_until(completed, timeout_s=90, interval_s=0.5, what="the workflow completing")

    # Spans arrive in batches: wait until every hop and call of the workflow has one. The
    # gateway's request is an HTTP SERVER span; each service's handling a CONSUMER span.
    wanted = {
        ("gateway", SERVER, "POST /v1/workflows/procurement"),
        *((svc, CONSUMER, "process ") for svc in HOPS),
    }

    def covered() -> bool:
        spans = receiver.of_trace(trace_id)
        return all(
            any(s["service"] == svc and s["kind"] == kind and s["name"].startswith(name) for s in spans)
            for svc, kind, name in wanted
        )

    await wait_until(covered, timeout_s=60, interval_s=0.5, what="spans of every hop")
    spans = receiver.of_trace(trace_id)
    clients = {(s["service"], s["name"]) for s in spans if s["kind"] == CLIENT}
    assert any(svc == "payment_agent" for svc, _ in clients), clients  # the payment provider

    # By OpenTelemetry's conventions, as tracing backends read them: consuming and publishing
    # on Kafka, and the language model's chat with the tokens it used.
    consumed = [s for s in spans if s["kind"] == CONSUMER]
    for span in consumed:
        found = span["attributes"]
        assert found["messaging.system"] == "kafka" and found["messaging.operation.type"] == "process"
        assert span["name"] == f"process {found['messaging.destination.name']}", span
        assert found["messaging.consumer.group.name"] and "messaging.kafka.offset" in found, span
    sent = [s for s in spans if s["kind"] == PRODUCER]
    assert {s["service"] for s in sent} >= {"gateway", "invoice_agent", "budget_agent", "payment_agent"}
    assert all(s["attributes"]["messaging.operation.type"] == "send" for s in sent), sent
    [chat, *_] = [s for s in spans if s["service"] == "invoice_agent" and s["name"].startswith("chat ")]
    assert chat["kind"] == CLIENT and chat["attributes"]["gen_ai.operation.name"] == "chat", chat
    assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0, chat
    assert chat["attributes"]["gen_ai.usage.output_tokens"] > 0, chat

    # One tree: every span's parent is the caller's span or another span of the trace.
    ids = {s["span_id"] for s in spans} | {root}
    orphans = [(s["service"], s["name"], s["parent"]) for s in spans if s["parent"] not in ids]
    assert not orphans, orphans
    assert {s["service"] for s in spans} >= {svc for svc, _, _ in wanted}

    # And the systems outside were called in the same trace.
    calls = (await stack.sandbox_stats())["traces"]
    assert isinstance(calls, list)
    called = {c["path"].split("/")[1] for c in calls}
    assert {"v1", "payments", "slack"} <= called, called
    assert all((c["traceparent"] or "").split("-")[1:2] == [trace_id] for c in calls), calls
