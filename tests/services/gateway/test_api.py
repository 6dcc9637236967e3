"""The gateway against hostile requests: every one is a 4xx problem+json naming what is
wrong, or a 202 whose events are exactly what was sent (any script, any emoji). And the
OpenAPI document is what the API does: schemathesis, every check, 0 failures."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from chorus.base.db import create_pool
from chorus.contracts.base import SEALED_PREFIX
from chorus.contracts.lifecycle import WorkflowCancelRequested, WorkflowEnded
from chorus.contracts.registry import Registry, load_registry
from chorus.platform.audit_projector.config import Settings as AuditSettings
from chorus.platform.audit_projector.domain import TERMINAL
from chorus.platform.audit_projector.replay import rebuild
from chorus.platform.audit_projector.service import SPEC as AUDIT_SPEC
from chorus.platform.gateway.config import Settings as GatewaySettings
from chorus.platform.gateway.service import SPEC as GATEWAY_SPEC
from chorus.runtime.runner import running
from chorus.tools.devstack import free_port
from chorus.web.heads import HEAD_TIMEOUT_S
from tests.support.apis import schemathesis
from tests.support.database import create_database, drop_database
from tests.support.kafka import (
    envelope,
    events_of,
    local_verifier,
    publish,
    read_topic,
    refused_by,
    stated_by,
)
from tests.support.onkafka import in_process
from tests.support.registry import isolated_schemas, provision
from tests.support.sealed import opened
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

SUBMITTER = {"Authorization": "Bearer demo-submitter-key"}
MANAGER = {"Authorization": "Bearer demo-manager-key"}
PROBLEM = "application/problem+json"
NON_ASCII = {
    "german": "Rechnung für Müller & Söhne GmbH, Straße 5, Größe XL",
    "japanese": "東京都千代田区の請求書、ＧＰＵ時間",
    "emoji": "GPU hours 🚀🧾 for the 👩‍💻 team",
    "rtl": "חשבונית עבור שירותי ענן — فاتورة",
}
UPDATE_TIMEOUT_S = 0.5
BODY_TIMEOUT_S = 3.0
"""The API's wait for a request body (short here so that a test can wait it out)."""


@dataclass
class Gateway:
    url: str
    registry: Registry
    database_url: str
    """Of the gateway and the audit projector beside it (its projection in ``audit_projector``)."""


def invoice(document_text: str = "INVOICE INV-1\nTotal: 10.00 EUR", run: str | None = None) -> dict[str, Any]:
    run = run or uuid.uuid4().hex[:8]
    return {
        "input": {
            "invoice_id": f"INV-{run}",
            "vendor_id": "vendor-acme",
            "po_number": "PO-1",
            "currency": "EUR",
            "total_cents": 1000,
            "document_text": document_text,
            "requester_ref": f"subject:{run}",
        },
        "subject_ref": f"subject:{run}",
    }


async def start_gateway(
    stack: AsyncExitStack,
    tmp: Path,
    kafka: str,
    server_url: str,
    *,
    topic_limits: dict[str, int] | None = None,
    rate_per_s: float = 10_000.0,
) -> Gateway:
    suffix = uuid.uuid4().hex[:8]
    root = isolated_schemas(tmp, suffix)
    for name, limit in (topic_limits or {}).items():
        path = root / "topics" / f"{name}.t{suffix}.yaml"
        data = yaml.safe_load(path.read_text())
        data["max_message_bytes"] = limit
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    # No agent answers an update here: each waits out its timeout, so it is short (fuzzing
    # sends many to the workflows it starts).
    workflows = yaml.safe_load((root / "workflows.yaml").read_text())
    workflows["procurement"]["signals"]["add_line"]["timeout_s"] = UPDATE_TIMEOUT_S
    (root / "workflows.yaml").write_text(yaml.safe_dump(workflows, sort_keys=False))
    registry = load_registry(root)
    await provision(registry, kafka)
    database = f"chorus_gw_{suffix}"
    db = await create_database(server_url, database)
    stack.push_async_callback(drop_database, server_url, database)
    common = in_process(kafka, db)
    # The gateway reads the audit projection through the projector's API; it runs beside it.
    # Consumer groups of their own: a group shared with another test's gateway rebalances
    # whenever that one starts, stops or is killed (and waits out a killed member).
    audit_settings = AuditSettings(**common, group_id=f"audit_projector-{suffix}")
    audit = await stack.enter_async_context(running(AUDIT_SPEC, audit_settings, registry=registry))
    assert audit.http is not None
    port = free_port()
    # Fuzzing sends thousands of requests with one key: unlimited unless a test says so.
    gateway_settings = GatewaySettings(
        **common,
        group_id=f"gateway-{suffix}",
        api_port=port,
        audit_url=f"http://127.0.0.1:{audit.http.port}",
        api_rate_per_s=rate_per_s,
        api_burst=max(rate_per_s, 3.0),
        api_body_timeout_s=BODY_TIMEOUT_S,
    )
    await stack.enter_async_context(running(GATEWAY_SPEC, gateway_settings, registry=registry))
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as client:
        for _ in range(100):
            try:
                await client.get(f"{url}/openapi.json")
                break
            except httpx.HTTPError:
                await asyncio.sleep(0.1)
    return Gateway(url, registry, db)


@pytest.fixture(scope="module")
async def gateway(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[Gateway]:
    async with AsyncExitStack() as stack:
        yield await start_gateway(stack, tmp_path_factory.mktemp("gw"), kafka_bootstrap, database_url)


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30.0) as client:
        yield client


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


async def test_idle_connections_lock_nobody_out_and_heads_are_bounded_in_size_and_time(
    gateway: Gateway, http: httpx.AsyncClient
) -> None:
    """Two hundred connections that never send a byte (the API's limit is 100 at a time);
    one header block of 40 kB; one request head sent half and never finished."""
    port = int(gateway.url.rsplit(":", 1)[1])
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(200)]
    half = await asyncio.open_connection("127.0.0.1", port)
    try:
        half[1].write(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n")
        await half[1].drain()  # ... and nothing more
        accepted = await http.post("/v1/workflows/procurement", json=invoice("text"), headers=SUBMITTER)
        assert accepted.status_code == 202, accepted.text
        big = await http.get("/openapi.json", headers={"X-Padding": "a" * 40_000})
        assert "exceeds 16384 bytes" in problem(big, 431)["detail"]
        started = asyncio.get_running_loop().time()
        answer = await asyncio.wait_for(half[0].read(), timeout=HEAD_TIMEOUT_S + 30)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"did not arrive within" in answer
        assert asyncio.get_running_loop().time() - started < HEAD_TIMEOUT_S + 5
        # The idle ones are closed by then too (EOF), their slots never taken.
        assert [await r.read() for r, _ in idle[:5]] == [b""] * 5
    finally:
        for _, writer in [*idle, half]:
            writer.close()


async def test_a_body_that_trickles_in_is_408_and_frees_its_connection(
    gateway: Gateway, http: httpx.AsyncClient
) -> None:
    port = int(gateway.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"POST /v1/workflows/procurement HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + b'{"input": '
        )
        await writer.drain()  # ... and nothing more
        # Meanwhile everyone else is served.
        assert (await http.get("/openapi.json")).status_code == 200
        answer = await asyncio.wait_for(reader.read(), timeout=BODY_TIMEOUT_S + 30)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b"connection: close" in head.lower()
    assert json.loads(body)["detail"] == f"the body did not arrive within {BODY_TIMEOUT_S:g} s"


async def test_a_body_over_the_cap_is_413_before_it_is_read_or_authenticated(http: httpx.AsyncClient) -> None:
    huge = b'{"input": "' + b"x" * 2_000_000 + b'"}'
    declared = await http.post("/v1/workflows/procurement", content=huge)  # no API key at all
    assert "1,048,576 bytes" in problem(declared, 413)["detail"]

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b"x" * 65_536

    streamed = await http.post(
        "/v1/workflows/procurement",
        content=chunks(),
        headers={**SUBMITTER, "Content-Type": "application/json"},
    )
    problem(streamed, 413)


@pytest.mark.parametrize(
    ("body", "pointer", "says"),
    [
        (json.dumps(invoice("a\x00b")).encode(), "/input/document_text", "NUL"),
        (json.dumps(invoice("\ud800")).encode(), "/input/document_text", "unpaired surrogate"),
        (
            json.dumps(invoice()).replace('"vendor_id"', '"vendor_id": "a", "vendor_id"', 1).encode(),
            "/",
            "duplicate",
        ),
        (json.dumps(invoice()).replace("1000", "NaN", 1).encode(), "/", "NaN"),
        (b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}", "/", "nested deeper"),
        ('{"input": "Grüße"}'.encode("latin-1"), "/", "not UTF-8"),
    ],
    ids=["nul", "surrogate", "duplicate-key", "nan", "deep", "latin-1"],
)
async def test_json_postgresql_could_not_store_is_422_naming_the_field(
    http: httpx.AsyncClient, body: bytes, pointer: str, says: str
) -> None:
    response = await http.post(
        "/v1/workflows/procurement", content=body, headers={**SUBMITTER, "Content-Type": "application/json"}
    )
    found = problem(response, 422)
    assert found["errors"][0]["pointer"] == pointer
    assert says in found["detail"]


@pytest.mark.parametrize(
    ("change", "pointer"),
    [
        ({"callback_url": "ftp://example.test/x"}, "/callback_url"),
        ({"callback_url": "https://example.test/" + "a" * 2100}, "/callback_url"),
        ({"subject_ref": "Jane Roe <jane@example.test>"}, "/subject_ref"),
        ({"unexpected": True}, "/unexpected"),
        # JSON's true is not a number of seconds (pydantic's lax mode read it as 1).
        ({"deadline_s": True}, "/deadline_s"),
        ({"deadline_s": "60"}, "/deadline_s"),
        ({"priority": True}, "/priority"),
    ],
)
async def test_bounds_and_shapes_of_the_body_are_422_naming_the_field(
    http: httpx.AsyncClient, change: dict[str, Any], pointer: str
) -> None:
    response = await http.post("/v1/workflows/procurement", json={**invoice(), **change}, headers=SUBMITTER)
    assert problem(response, 422)["errors"][0]["pointer"] == pointer


@pytest.mark.parametrize("hidden", ["\u200b", "\u202e"], ids=["zero-width-space", "right-to-left-override"])
async def test_a_vendor_id_hiding_characters_is_422_naming_the_field_and_the_character(
    http: httpx.AsyncClient, hidden: str
) -> None:
    # "vendor\u200b-acme" looks like vendor-acme and would not compare equal to it.
    body = invoice()
    body["input"]["vendor_id"] = f"vendor{hidden}-acme"
    response = await http.post("/v1/workflows/procurement", json=body, headers=SUBMITTER)
    found = problem(response, 422)
    assert found["errors"][0]["pointer"] == "/input/vendor_id"
    assert f"U+{ord(hidden):04X}" in found["detail"]


async def test_idempotency_keys_are_bounded_and_never_a_500(http: httpx.AsyncClient) -> None:
    body = invoice()
    too_long = await http.post(
        "/v1/workflows/procurement", json=body, headers={**SUBMITTER, "Idempotency-Key": "k" * 256}
    )
    assert problem(too_long, 422)["errors"][0]["pointer"] == "header:idempotency-key"
    non_ascii = await http.post(
        "/v1/workflows/procurement",
        json=body,
        headers=[
            (b"Authorization", SUBMITTER["Authorization"].encode()),
            (b"Idempotency-Key", "schlüssel".encode()),
        ],
    )
    assert problem(non_ascii, 422)["errors"][0]["pointer"] == "header:idempotency-key"
    key = uuid.uuid4().hex + "k" * 223  # 255 characters
    first = await http.post(
        "/v1/workflows/procurement", json=body, headers={**SUBMITTER, "Idempotency-Key": key}
    )
    assert first.status_code == 202, first.text
    again = await http.post(
        "/v1/workflows/procurement", json=body, headers={**SUBMITTER, "Idempotency-Key": key}
    )
    assert again.status_code == 202
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["workflow_id"] == first.json()["workflow_id"]


async def test_unknown_workflow_types_and_ids_are_problems(http: httpx.AsyncClient) -> None:
    unknown = await http.post("/v1/workflows/teleport", json={"input": {}}, headers=SUBMITTER)
    assert "known: ['procurement', 'research_report']" in problem(unknown, 405)["detail"]
    assert unknown.headers["allow"] == "GET"
    problem(await http.get("/v1/workflows/wf-" + "z" * 150, headers=SUBMITTER), 404)
    problem(await http.get("/v1/workflows/" + "z" * 300, headers=SUBMITTER), 422)


@pytest.mark.parametrize("script", sorted(NON_ASCII))
async def test_any_script_is_accepted_and_travels_unchanged(
    http: httpx.AsyncClient, gateway: Gateway, kafka_bootstrap: str, script: str
) -> None:
    text = NON_ASCII[script]
    response = await http.post("/v1/workflows/procurement", json=invoice(text), headers=SUBMITTER)
    assert response.status_code == 202, response.text
    workflow_id = response.json()["workflow_id"]
    topic = gateway.registry.physical_topic("invoice.received")
    records = await read_topic(
        kafka_bootstrap,
        [topic],
        until=lambda rs: any(e["workflow_id"] == workflow_id for e in events_of(rs, "invoice.received")),
    )
    [sent] = [e for e in events_of(records, "invoice.received") if e["workflow_id"] == workflow_id]
    # Personal data: sealed on the topic, and exactly the text again once opened.
    assert sent["payload"]["document_text"].startswith(SEALED_PREFIX)
    assert text not in json.dumps(sent, ensure_ascii=False)
    assert opened(sent["payload"]["document_text"]) == text


async def test_an_operator_who_may_rewrite_the_approval_policy_may_not_also_submit(
    http: httpx.AsyncClient,
) -> None:
    operator = {"Authorization": "Bearer demo-operator-key"}
    refused = problem(
        await http.post("/v1/workflows/procurement", json=invoice("text"), headers=operator), 403
    )
    assert "operator may not do this (needs submitter)" in refused["detail"]


async def test_a_signal_is_the_gateways_sealed_event_on_the_workflows_key_and_an_unanswered_update_202s(
    gateway: Gateway, http: httpx.AsyncClient, kafka_bootstrap: str
) -> None:
    accepted = await http.post("/v1/workflows/procurement", json=invoice("text"), headers=SUBMITTER)
    workflow_id = accepted.json()["workflow_id"]
    line = {"line": {"description": "GPU-Stunden", "quantity": 10, "unit_price_cents": 3100}}
    reason = "die Zeile fehlte, sagt Müller"
    update = await http.post(
        f"/v1/workflows/{workflow_id}/updates/add_line",
        json={"input": line, "reason": reason},
        headers=SUBMITTER,
    )
    # No invoice agent runs here: nobody answers within the timeout, and the signal stands.
    assert update.status_code == 202, update.text
    sent = update.json()
    assert (sent["status"], sent["answer"], sent["update"]) == ("sent", None, True)
    topic = gateway.registry.physical_topic("invoice.line_added")
    records = await read_topic(
        kafka_bootstrap,
        [topic],
        until=lambda rs: any(e["workflow_id"] == workflow_id for e in events_of(rs, "invoice.line_added")),
    )
    # On the workflow's key: ordered with everything else that happens to it.
    [signal] = [
        r for r in records if r.key == workflow_id.encode() and b'"invoice.line_added"' in (r.value or b"")
    ]
    event = json.loads(signal.value)
    assert event["producer"]["service"] == "gateway" and event["payload"]["signal_id"] == sent["signal_id"]
    assert event["payload"]["line"] == line["line"]
    # Who sent it and why are personal data: sealed on the topic.
    sealed = (event["payload"]["sent_by"], event["payload"]["reason"])
    assert all(value.startswith(SEALED_PREFIX) for value in sealed)
    assert (opened(sealed[0]), opened(sealed[1])) == ("demo-submitter", reason)
    assert reason not in signal.value.decode()
    later = await http.get(sent["status_url"], headers=SUBMITTER)
    assert later.status_code == 200 and later.json()["status"] == "sent"
    assert (await http.get(sent["status_url"], headers=MANAGER)).status_code == 404


async def test_a_cancel_the_gateway_did_not_sign_ends_nothing(
    gateway: Gateway, http: httpx.AsyncClient, kafka_bootstrap: str
) -> None:
    """Any writer of workflows.lifecycle (five services) could end any workflow by naming the
    gateway as the producer of a cancel request; only the gateway's signature counts."""
    accepted = await http.post("/v1/workflows/procurement", json=invoice("text"), headers=SUBMITTER)
    workflow_id = accepted.json()["workflow_id"]
    asked = WorkflowCancelRequested(requested_by="someone", reason="forged")
    forged = stated_by(envelope(asked, workflow_id=workflow_id, workflow_type="procurement"), "gateway")
    lifecycle = gateway.registry.physical_topic("workflow.ended")
    await publish(kafka_bootstrap, lifecycle, [forged], sign=False)
    await refused_by(kafka_bootstrap, gateway.registry, forged, {"gateway"})
    cancel = await http.post(
        f"/v1/workflows/{workflow_id}/cancel", json={"reason": "mine"}, headers=SUBMITTER
    )
    assert cancel.status_code == 202, cancel.text
    records = await read_topic(
        kafka_bootstrap,
        [lifecycle],
        until=lambda rs: bool(_of(rs, "workflow.ended", workflow_id)),
        timeout_s=60,
    )
    [ended] = _of(records, "workflow.ended", workflow_id)  # by the cancel the gateway signed
    assert ended["payload"]["outcome"] == "cancelled"


async def test_an_end_its_producer_did_not_sign_ends_nothing_and_a_signed_one_does(
    gateway: Gateway, http: httpx.AsyncClient, kafka_bootstrap: str
) -> None:
    """A workflow.ended stops every service and makes the gateway call the submitter back
    saying how it ended. Any writer of workflows.lifecycle (or a timer firing onto it) could
    claim the payment agent ended a pending workflow "completed"; neither the gateway nor
    the audit projection acts on it, nor does an auditor's replay of the topics. The same
    end, signed by the payment agent, does."""
    since = datetime.now(timezone.utc) - timedelta(seconds=1)
    accepted = await http.post("/v1/workflows/procurement", json=invoice("text"), headers=SUBMITTER)
    workflow_id = accepted.json()["workflow_id"]
    lifecycle = gateway.registry.physical_topic("workflow.ended")
    paid = WorkflowEnded(outcome="completed", result={"paid": True}, ended_by="payment_agent")
    claim = stated_by(envelope(paid, workflow_id=workflow_id, workflow_type="procurement"), "payment_agent")
    await publish(kafka_bootstrap, lifecycle, [claim], sign=False)
    await refused_by(kafka_bootstrap, gateway.registry, claim, {"gateway", "audit_projector"})

    async def status() -> str:
        answer = await http.get(f"/v1/workflows/{workflow_id}", headers=SUBMITTER)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["status"])

    assert await status() not in TERMINAL
    assert await replayed_status(gateway, kafka_bootstrap, workflow_id, since) not in TERMINAL
    signed = claim.model_copy(update={"event_id": uuid.uuid4()})
    await publish(kafka_bootstrap, lifecycle, [signed])  # the payment agent's key signs it
    await wait_until(lambda: _is(status(), "completed"), what="the signed end to end the workflow")


async def test_a_sealed_value_pasted_outside_a_personal_field_is_refused_never_opened(
    gateway: Gateway, http: httpx.AsyncClient, kafka_bootstrap: str
) -> None:
    """The read API opens sealed values for its reader. One workflow's end carrying another
    workflow's sealed submitter in its free-form result (a field not marked personal) would
    have the second workflow's reader shown the first one's submitter; every consumer
    refuses the event instead, even signed by the service that may end workflows."""
    submitted = [
        (await http.post("/v1/workflows/procurement", json=invoice("text"), headers=SUBMITTER)).json()
        for _ in range(2)
    ]
    victim, mine = (s["workflow_id"] for s in submitted)
    lifecycle = gateway.registry.physical_topic("workflow.started")
    records = await read_topic(
        kafka_bootstrap, [lifecycle], until=lambda rs: bool(_of(rs, "workflow.started", victim)), timeout_s=60
    )
    [started] = _of(records, "workflow.started", victim)
    token = started["payload"]["submitted_by"]
    assert token.startswith(SEALED_PREFIX)
    ended = WorkflowEnded(outcome="completed", result={"receipt": token}, ended_by="payment_agent")
    pasted = stated_by(envelope(ended, workflow_id=mine, workflow_type="procurement"), "payment_agent")
    await publish(kafka_bootstrap, lifecycle, [pasted])  # signed by the payment agent's key
    await refused_by(
        kafka_bootstrap, gateway.registry, pasted, {"gateway", "audit_projector"}, category="persistent"
    )
    shown = await http.get(f"/v1/workflows/{mine}", headers=SUBMITTER)
    assert shown.status_code == 200, shown.text
    assert shown.json()["status"] not in TERMINAL
    assert "receipt" not in shown.text


def _of(records: list[Any], event_type: str, workflow_id: str) -> list[dict[str, Any]]:
    return [e for e in events_of(records, event_type) if e["workflow_id"] == workflow_id]


async def replayed_status(gateway: Gateway, bootstrap: str, workflow_id: str, since: datetime) -> str | None:
    """The workflow's status in a replay of the topics (from ``since``) into a fresh schema."""
    pool = await create_pool(gateway.database_url)
    try:
        replay = await rebuild(
            registry=gateway.registry,
            bootstrap=bootstrap,
            pool=pool,
            live_schema="audit_projector",
            since=since,
            verifier=local_verifier(gateway.registry),
        )
        async with pool.acquire() as conn:
            schema = replay.target.schema
            status: str | None = await conn.fetchval(
                f"SELECT status FROM {schema}.workflow_status WHERE workflow_id = $1", workflow_id
            )
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")
    finally:
        await pool.close()
    return status


async def _is(value: Awaitable[str], wanted: str) -> bool:
    return await value == wanted


async def test_a_caller_cannot_hand_the_gateway_a_sealed_value_to_open(http: httpx.AsyncClient) -> None:
    token = f"{SEALED_PREFIX}local.{'0' * 32}:{uuid.uuid4()}:AAAA"
    found = problem(await http.post("/v1/workflows/procurement", json=invoice(token), headers=SUBMITTER), 422)
    assert found["errors"][0]["pointer"] == "/input/document_text"
    assert "looks sealed" in found["errors"][0]["message"]
    # Nor as a cancel reason (or a reviewer's comment): text people write is taken in clear.
    cancel = await http.post("/v1/workflows/wf-any/cancel", json={"reason": token}, headers=SUBMITTER)
    assert problem(cancel, 422)["errors"][0]["pointer"] == "/reason"


async def test_an_event_too_large_for_its_topic_is_413_naming_the_field(
    tmp_path: Path, kafka_bootstrap: str, database_url: str
) -> None:
    async with AsyncExitStack() as stack:
        small = await start_gateway(
            stack, tmp_path, kafka_bootstrap, database_url, topic_limits={"procurement.events": 4096}
        )
        async with httpx.AsyncClient(base_url=small.url) as http:
            response = await http.post(
                "/v1/workflows/procurement", json=invoice("€" * 5000), headers=SUBMITTER
            )
    found = problem(response, 413)
    assert found["errors"][0]["pointer"] == "/input/document_text"
    assert "more than the 3,584" in found["detail"]


@pytest.mark.parametrize("key", ["demo-submitter-key", "demo-manager-key"], ids=["submitter", "reviewer"])
async def test_the_openapi_document_is_what_the_api_does(gateway: Gateway, tmp_path: Path, key: str) -> None:
    """schemathesis, every check: no server error, no undocumented status or content type,
    invalid input refused and valid input accepted, authentication honoured. As a submitter
    and as a reviewer, so every operation is reached with a role that may call it."""
    summary = await schemathesis(
        gateway.url,
        key,
        tmp_path / "schemathesis.txt",
        "--mode",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        # A NUL in a string is refused by a documented rule of every API (400 or 422, see
        # tests/e2e), not a schema property, so valid-input checks would count it a failure.
        "--generation-allow-x00",
        "false",
        "--generation-codec",
        "utf-8",
        # A search query is a language (chorus.contracts.search), not a schema: a string the
        # schema allows may still be no query, and is a 400 saying why. Every other check holds.
        # A schedule's input is its workflow type's start event, named by another field: the
        # schema says "an object", the type's model says which (a 422 naming the field).
        config="""
[[operations]]
include-name = "GET /v1/workflows"
checks.positive_data_acceptance.expected-statuses = ["2XX", "400", "401", "403", "404", "409", "429", "5XX"]

[[operations]]
include-name = "POST /v1/schedules"
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "409", "422", "429", "5XX"]
""",
    )
    print(summary)


async def test_reads_answer_503_while_the_audit_projector_is_unreachable_and_writes_go_on(
    tmp_path: Path, kafka_bootstrap: str, database_url: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    registry = load_registry(isolated_schemas(tmp_path, suffix))
    await provision(registry, kafka_bootstrap)
    port = free_port()
    settings = GatewaySettings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        log_json=False,
        http_port=0,
        api_port=port,
        audit_url="http://127.0.0.1:9",  # nothing listens there
    )
    async with (
        running(GATEWAY_SPEC, settings, registry=registry),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as http,
    ):
        for _ in range(100):
            try:
                await http.get("/openapi.json")
                break
            except httpx.HTTPError:
                await asyncio.sleep(0.1)
        read = await http.get("/v1/workflows/wf-anything", headers=SUBMITTER)
        write = await http.post("/v1/workflows/procurement", json=invoice(), headers=SUBMITTER)
    assert problem(read, 503)["title"] == "Read model unavailable"
    assert read.headers["retry-after"] == "5"
    assert write.status_code == 202, write.text


async def test_a_key_over_its_rate_gets_429_with_retry_after_and_other_keys_go_on(
    tmp_path: Path, kafka_bootstrap: str, database_url: str
) -> None:
    async with AsyncExitStack() as stack:
        gateway = await start_gateway(stack, tmp_path, kafka_bootstrap, database_url, rate_per_s=0.2)
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30.0) as client:
            answers = [(await client.get("/v1/workflows/wf-none", headers=SUBMITTER)) for _ in range(4)]
            other = await client.get("/v1/workflows/wf-none", headers=MANAGER)
    assert [a.status_code for a in answers] == [404, 404, 404, 429]
    limited = problem(answers[3], 429)
    assert int(answers[3].headers["retry-after"]) >= 1
    assert "demo-submitter" in limited["detail"]
    assert other.status_code == 404  # its own bucket
