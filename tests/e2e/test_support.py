"""The third reference workflow end to end: examples/support, a project of its own, runs
beside the platform as its users run it (DevStack(project=...): the project's registry in
union with the platform's, its services found in its folder, the sandbox with its module),
every service its own process on the real Kafka and PostgreSQL, tickets submitted through
the gateway."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from chorus.contracts.base import is_sealed
from chorus.contracts.registry import Registry
from chorus.testing.stack import read_events
from chorus.tools.devstack import REFERENCE_PROJECT, DevStack
from tests.support.pgbouncer import PgBouncer
from tests.support.processes import chorus
from tests.support.stacks import own_stack
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

SUBMITTER = {"Authorization": "Bearer demo-submitter-key"}
MANAGER = {"Authorization": "Bearer demo-manager-key"}
OPERATOR = {"Authorization": "Bearer demo-operator-key"}
TERMINAL = {"completed", "rejected", "failed", "timed_out", "cancelled"}
SERVICES = (
    "key_service",
    "audit_projector",
    "approval_gate",
    "timer_service",
    "deadletter_service",
    "gateway",
)
"""The platform services a ticket meets (the project's own are found, not listed)."""
TRIAGE_ENV = {
    "CHORUS_REPLY_WITHIN_S": "2",
    # Its price table (dollars per million tokens in, out) for its model.
    "CHORUS_LLM_PRICES": '{"gpt-4o-mini": [0.15, 0.6]}',
    # A fallback model, and a breaker that opens when most of the primary's calls of the last
    # 3 s failed (at least 2): the earlier tests' answers are out of its window by then.
    "CHORUS_LLM_FALLBACK": '[{"model": "gpt-4.1-nano"}]',
    "CHORUS_LLM_BREAKER": '{"min_calls": 2, "window_s": 3, "open_s": 30}',
    # Answers streamed, what the model has written published at most every half second.
    "CHORUS_AGENT_STREAM_EVERY_S": "0.5",
}


@dataclass
class Support:
    stack: DevStack
    http: httpx.AsyncClient
    pgbouncer: PgBouncer | None
    registry: Registry
    bootstrap: str

    @property
    def sandbox(self) -> str:
        return self.stack.sandbox_url

    @property
    def dead_letters(self) -> str:
        health = self.stack.procs["deadletter_service"].health_url or ""
        return health.removesuffix("/health")

    async def submit(self, customer_id: str, subject: str, refund_cents: int = 0) -> str:
        ticket = {
            "customer_id": customer_id,
            "subject": subject,
            "body": "Order 77.",
            "refund_cents": refund_cents,
        }
        response = await self.http.post(
            "/v1/workflows/support_ticket", json={"input": ticket}, headers=SUBMITTER
        )
        assert response.status_code == 202, response.text
        return str(response.json()["workflow_id"])

    async def wait(
        self, workflow_id: str, predicate: Any, what: str, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        status: dict[str, Any] = await wait_until(
            lambda: self.status_of(workflow_id),
            until=predicate,
            timeout_s=timeout_s,
            interval_s=0.2,
            what=f"{what} of {workflow_id}",
        )
        return status

    async def status_of(self, workflow_id: str) -> dict[str, Any]:
        body: dict[str, Any] = (await self.http.get(f"/v1/workflows/{workflow_id}", headers=SUBMITTER)).json()
        return body

    async def ended(self, workflow_id: str) -> dict[str, Any]:
        return await self.wait(workflow_id, lambda s: s.get("status") in TERMINAL, "end")

    async def answered(self, workflow_id: str) -> dict[str, Any]:
        """Its status once it ended and the audit projection has its answer too (the answer
        and the end are on two topics: the projection may read them in either order)."""

        def done(status: dict[str, Any]) -> bool:
            timeline = status.get("timeline", [])
            has_answer = any(e["event_type"] == "ticket.answered" for e in timeline)
            return status.get("status") in TERMINAL and has_answer

        return await self.wait(workflow_id, done, "the answer and the end")

    async def replies_to(self, customer_id: str) -> list[dict[str, Any]]:
        replies = (await self.http.get(f"{self.sandbox}/helpdesk/replies")).json()
        return [r for r in replies if r["customer_id"] == customer_id]


def answered(status: dict[str, Any]) -> dict[str, Any]:
    (event,) = [e for e in status["timeline"] if e["event_type"] == "ticket.answered"]
    return dict(event["payload"])


@pytest.fixture(scope="module")
async def support(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[Support]:
    tmp = tmp_path_factory.mktemp("support")
    async with (
        own_stack(
            tmp,
            kafka_bootstrap,
            database_url,
            name="support",
            services=SERVICES,
            project=REFERENCE_PROJECT,
            service_env={"triage_agent": TRIAGE_ENV},
            # As a deployment past one database's connections runs: each service's pool
            # through PgBouncer in transaction mode (the relay's leader lock directly).
            through_pgbouncer=True,
        ) as own,
        httpx.AsyncClient(base_url=own.stack.api_url, timeout=10.0) as http,
    ):
        yield Support(own.stack, http, own.pgbouncer, own.registry, kafka_bootstrap)


async def test_a_small_refund_is_answered_and_replied_to_once(support: Support) -> None:
    workflow = await support.submit("cust-1001", "Refund for a double charge", refund_cents=1200)
    status = await support.answered(workflow)
    assert status["status"] == "completed"
    reply = answered(status)
    assert (reply["category"], reply["refund_cents"], reply["overdue"]) == ("billing", 1200, False)
    assert len(await support.replies_to("cust-1001")) >= 1
    assert [e for e in status["timeline"] if e["event_type"] == "approval.requested"] == []


async def test_a_large_refund_waits_for_the_manager_and_is_late_after_its_reply_due_timer(
    support: Support,
) -> None:
    workflow = await support.submit("cust-1002", "Refund my annual plan", refund_cents=24000)
    status = await support.wait(
        workflow,
        lambda s: (
            any(e["event_type"] == "ticket.reply_due" for e in s.get("timeline", []))
            and (s.get("pending_approval") or {}).get("tier") == "manager"
        ),
        "the reply-due timer while waiting for the manager",
    )
    assert await support.replies_to("cust-1002") == []  # nothing went out before a person decided
    approval = status["pending_approval"]["approval_id"]
    decided = await support.http.post(
        f"/v1/approvals/{approval}", json={"decision": "approve"}, headers=MANAGER
    )
    assert decided.status_code == 202, decided.text
    status = await support.answered(workflow)
    assert status["status"] == "completed" and answered(status)["overdue"] is True
    assert len(await support.replies_to("cust-1002")) == 1


async def test_the_agent_looks_the_orders_up_notes_the_ticket_once_and_the_reviewer_sees_its_calls(
    support: Support,
) -> None:
    """The triage agent's loop with the CRM's tools: the refund is capped by what the
    customer's orders left to refund, the note is written once, and the manager who decides
    sees which tools the agent called."""
    orders = [{"order_id": "ord-9", "total_cents": 9000, "refunded_cents": 3000}]
    customer = {"customer_id": "cust-orders", "name": "Katherine Johnson", "plan": "pro", "orders": orders}
    await support.http.post(f"{support.sandbox}/crm/customers", json=customer)
    workflow = await support.submit("cust-orders", "Refund both charges", refund_cents=12000)
    status = await support.wait(workflow, lambda s: s.get("pending_approval"), "an approval request")
    context = status["pending_approval"]["context"]
    assert context["summary"] == "refund of 60.00 to Katherine Johnson"  # 90.00 paid, 30.00 back
    assert context["steps_taken"][:3] == [
        "called lookup_customer",
        "called order_history",
        "called add_crm_note",
    ]
    notes = [
        n
        for n in (await support.http.get(f"{support.sandbox}/crm/notes")).json()
        if n["customer_id"] == "cust-orders"
    ]
    assert [(n["note"], n["requests"]) for n in notes] == [("billing ticket: Refund both charges", 1)]
    # What the model used is the workflow's spend (its own topic: the projection may read it
    # after the approval): in its status, and in `chorus workflows show`.
    spend = (await support.wait(workflow, lambda s: s.get("spend"), "its spend"))["spend"]
    assert (spend["model_turns"], spend["tool_calls"], spend["models"]) == (3, 3, ["gpt-4o-mini"])
    expected = spend["input_tokens"] * 0.15 + spend["output_tokens"] * 0.6  # micro-dollars
    # Each turn is priced on its own, to the micro-dollar: the sum is within a turn's rounding.
    assert spend["input_tokens"] > 0 and abs(spend["cost_micro_usd"] - expected) <= 3 and expected > 0
    code, out, err = await chorus(
        "workflows", "show", workflow, env={"CHORUS_GATEWAY_URL": support.stack.api_url}
    )
    assert code == 0, err
    assert f"spend ${spend['cost_usd']:.6f}" in out and "3 model turns  3 tool calls  gpt-4o-mini" in out
    # The loop turn by turn in its timeline, what the model saw and said opened for the reader...
    timeline = (await support.status_of(workflow))["timeline"]
    turns = [e for e in timeline if e["event_type"] == "agent.turn_recorded"]
    assert [e["external_call"] for e in turns] == [
        "turn 1: gpt-4o-mini called lookup_customer, order_history",
        "turn 2: gpt-4o-mini called add_crm_note",
        "turn 3: gpt-4o-mini answered",
    ]
    assert "Katherine Johnson" in turns[0]["payload"]["said"]["tool_calls"][0]["result"]
    assert '"refund_cents": 6000' in turns[2]["payload"]["said"]["answer"]
    # ... and sealed on the topic: personal data, erased with its subject.
    records = await read_events(
        support.registry, support.bootstrap, "agent.turn_recorded", workflow_id=workflow, count=3
    )
    assert all(is_sealed(r.payload.said) for r in records), [r.payload.said for r in records]


async def test_an_agent_loop_past_its_limit_goes_to_a_person_saying_what_it_spent(support: Support) -> None:
    """The model never answers (it looks the orders up again and again): at its 10 turns the
    loop stops, the runtime's retries ask the model nothing more, and a person is asked to
    review, told the limit and the spend."""
    workflow = await support.submit("cust-1002", "ENDLESS refund question", refund_cents=100)
    status = await support.wait(
        workflow, lambda s: (s.get("pending_approval") or {}).get("context"), "a review", timeout_s=90
    )
    assert status["status"] == "waiting"  # for the reviewer (a person's approval of the review)
    why = status["pending_approval"]["context"]["why"]
    assert "the agent loop stopped: 10 model turns without an answer (spent " in why, why
    spent = re.search(r"spent (\d+) tokens, \$(\d+\.\d{6})\)", why)
    assert spent is not None and int(spent.group(1)) > 0 and float(spent.group(2)) > 0, why
    traces = (await support.http.get(f"{support.sandbox}/stats")).json()["traces"]
    asked = [t for t in traces if t["path"] == "/crm/customers/cust-1002/orders"]
    assert len(asked) >= 10  # its 10 turns' calls (other tickets of cust-1002 add theirs)


async def test_a_long_answer_shows_on_the_workflows_status_as_the_model_writes_it(support: Support) -> None:
    """The model writes its answer slowly (a piece a second): the workflow's status shows
    what it has written while the step runs, the console's page too; the step's outcome
    replaces it."""
    workflow = await support.submit("cust-1001", "SLOW refund question", refund_cents=300)
    writing = await support.wait(
        workflow, lambda s: (s.get("streaming") or {}).get("chars"), "the answer as it is written"
    )
    assert writing["status"] == "running"
    shown = writing["streaming"]
    assert (shown["service"], shown["step"], shown["turn"]) == ("triage_agent", "triage", 3)
    assert shown["text"].startswith('{"category": "billing"') and shown["chars"] == len(shown["text"])
    status = await support.answered(workflow)
    assert status["streaming"] is None
    reply = answered(status)
    whole = json.dumps({k: reply[k] for k in ("category", "reply", "refund_cents")})  # as the model wrote it
    assert whole.startswith(shown["text"]) and shown["chars"] < len(whole)  # shown while being written
    rows = [e for e in status["timeline"] if e["event_type"] == "agent.output_streamed"]
    assert rows and all("writing (" in (e.get("external_call") or "") for e in rows)


async def test_a_rejected_refund_ends_rejected_and_nothing_is_sent(support: Support) -> None:
    customer = {"customer_id": "cust-reject", "name": "Edsger Dijkstra", "plan": "team"}
    await support.http.post(f"{support.sandbox}/crm/customers", json=customer)
    workflow = await support.submit("cust-reject", "Refund everything", refund_cents=90000)
    status = await support.wait(workflow, lambda s: s.get("pending_approval"), "an approval request")
    approval = status["pending_approval"]["approval_id"]
    decided = await support.http.post(
        f"/v1/approvals/{approval}", json={"decision": "reject", "comment": "not covered"}, headers=MANAGER
    )
    assert decided.status_code == 202, decided.text
    assert (await support.ended(workflow))["status"] == "rejected"
    assert await support.replies_to("cust-reject") == []


async def test_a_misfiled_answer_is_corrected_by_the_runtimes_semantic_retry(support: Support) -> None:
    workflow = await support.submit("cust-1001", "MISFILED refund", refund_cents=300)
    status = await support.answered(workflow)
    assert status["status"] == "completed" and answered(status)["category"] == "billing"


async def test_an_unknown_customer_is_a_dead_letter_until_redriven_then_answered_once(
    support: Support,
) -> None:
    workflow = await support.submit("cust-unknown", "Refund please", refund_cents=500)
    letters: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while not letters and time.monotonic() < deadline:
        response = await support.http.get(
            f"{support.dead_letters}/v1/dead-letters", params={"service": "triage_agent"}, headers=OPERATOR
        )
        letters = [i for i in response.json()["items"] if i["original_workflow_id"] == workflow]
        await asyncio.sleep(0.3)
    assert len(letters) == 1 and letters[0]["error"]["category"] == "persistent"
    assert (await support.status_of(workflow))["status"] not in TERMINAL

    customer = {"customer_id": "cust-unknown", "name": "Barbara Liskov", "plan": "pro"}
    await support.http.post(f"{support.sandbox}/crm/customers", json=customer)
    redriven = await support.http.post(
        f"{support.dead_letters}/v1/dead-letters/{letters[0]['id']}/redrive",
        json={"reason": "customer added to the CRM"},
        headers=OPERATOR,
    )
    assert redriven.status_code == 200, redriven.text
    status = await support.ended(workflow)
    assert status["status"] == "completed"
    assert [r["customer_id"] for r in await support.replies_to("cust-unknown")] == ["cust-unknown"]
    # The redriven step went on from its checkpoint: the model's first turn (the lookups it
    # asked for) was kept before the lookup failed, and was not asked again.
    stats = (await support.http.get(f"{support.sandbox}/stats")).json()
    assert [asked for asked in stats["llm_repeated"] if asked.startswith("triage_ticket")] == []


async def test_a_bulk_redrive_by_query_redrives_each_waiting_tickets_letter_once_as_the_operator(
    support: Support,
) -> None:
    """Three tickets of customers the CRM does not know yet wait on a dead letter each. Once
    they are added, an operator redrives every support ticket that needs attention in one
    bulk action: the dead-letter service redrives each letter once, naming the operator and
    the bulk action, and each ticket is answered once."""
    run = uuid.uuid4().hex[:8]
    customers = [f"cust-{run}-{i}" for i in range(3)]
    ids = [await support.submit(c, "Refund please", refund_cents=500) for c in customers]
    for workflow_id in ids:
        await support.wait(workflow_id, lambda s: s.get("status") == "attention", "a dead letter")
    query = "workflow_type = 'support_ticket' AND status = 'attention'"
    ask = {"action": "redrive", "query": query, "reason": f"customers {run} added to the CRM"}
    dry = await support.http.post("/v1/bulk-actions", json={**ask, "dry_run": True}, headers=OPERATOR)
    assert dry.status_code == 200 and set(ids) <= {i["workflow_id"] for i in dry.json()["items"]}, dry.text
    for customer in customers:
        crm = {"customer_id": customer, "name": "Grace Hopper", "plan": "pro"}
        await support.http.post(f"{support.sandbox}/crm/customers", json=crm)
    created = await support.http.post("/v1/bulk-actions", json=ask, headers=OPERATOR)
    assert created.status_code == 202, created.text
    bulk_id = created.json()["bulk_id"]

    for workflow_id, customer in zip(ids, customers, strict=True):
        assert (await support.ended(workflow_id))["status"] == "completed"
        assert [r["customer_id"] for r in await support.replies_to(customer)] == [customer]
    action = (await support.http.get(f"/v1/bulk-actions/{bulk_id}", headers=OPERATOR)).json()
    mine = {i["workflow_id"]: i for i in action["items"] if i["workflow_id"] in ids}
    assert {i["status"] for i in mine.values()} == {"done"}, action
    operations = (
        await support.http.get(
            f"{support.dead_letters}/v1/operations", params={"actor": "sam.operator"}, headers=OPERATOR
        )
    ).json()["items"]
    redriven = [o for o in operations if bulk_id in o["reason"]]
    assert len(redriven) == 3 and {o["op"] for o in redriven} == {"redrive"}, redriven


async def test_every_service_reached_postgresql_through_pgbouncer_in_transaction_mode(
    support: Support,
) -> None:
    """The tickets above completed with every service's pool behind PgBouncer."""
    workflow = await support.submit("cust-1001", "Where is my invoice?")
    assert (await support.ended(workflow))["status"] == "completed"
    assert support.pgbouncer is not None
    assert support.pgbouncer.logins() == set(support.stack.database_roles)


async def test_with_the_primary_models_breaker_open_the_fallback_answers_and_the_spend_says_which(
    support: Support,
) -> None:
    """The primary model is down (503): the step is retried until its breaker opens, then the
    fallback model answers every turn, and the workflow's spend names it. (Last in the
    module: the primary's breaker stays open for a while after.)"""
    await support.http.put(f"{support.sandbox}/llm/outages/gpt-4o-mini")
    # The earlier tests' answers out of the breaker's window first (3 s, TRIAGE_ENV): under
    # load they can come late enough that the first failures are not most of its calls.
    await asyncio.sleep(3.5)
    try:
        workflow = await support.submit("cust-1001", "Refund for a late delivery", refund_cents=700)
        status = await support.answered(workflow)
    finally:
        await support.http.delete(f"{support.sandbox}/llm/outages/gpt-4o-mini")
    assert status["status"] == "completed" and answered(status)["refund_cents"] == 700
    spend = (await support.wait(workflow, lambda s: s.get("spend"), "its spend"))["spend"]
    assert spend["models"] == ["gpt-4.1-nano"] and spend["model_turns"] == 3
