"""The reference workflows end to end: every service its own process, real Kafka and PostgreSQL.

Time is simulated for all processes at once (an offset file every service's clock
reads), so 8-hour approval windows pass in seconds.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from chorus.clock import OffsetFileClock
from chorus.devstack import DevStack
from tests.support.database import create_database, drop_database
from tests.support.registry import isolated_registry

pytestmark = pytest.mark.integration

SUBMITTER = {"Authorization": "Bearer demo-submitter-key"}
MANAGER = {"Authorization": "Bearer demo-manager-key"}
DIRECTOR = {"Authorization": "Bearer demo-director-key"}
EDITOR = {"Authorization": "Bearer demo-editor-key"}
HOUR = 3600.0
TERMINAL = {"completed", "rejected", "failed", "compensated", "timed_out", "cancelled"}


class World:
    def __init__(self, stack: DevStack, clock_file: Path, http: httpx.AsyncClient, database_url: str) -> None:
        self.stack = stack
        self.clock_file = clock_file
        self.http = http
        self.database_url = database_url
        """The services' own database (see the world fixture)."""

    def advance(self, seconds: float) -> None:
        OffsetFileClock.advance(self.clock_file, seconds)

    async def submit(
        self, workflow_type: str, body: dict[str, Any], key: str | None = None
    ) -> httpx.Response:
        headers = {**SUBMITTER, **({"Idempotency-Key": key} if key else {})}
        return await self.http.post(f"/v1/workflows/{workflow_type}", json=body, headers=headers)

    async def status(self, workflow_id: str) -> dict[str, Any]:
        response = await self.http.get(f"/v1/workflows/{workflow_id}", headers=SUBMITTER)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def wait(
        self, workflow_id: str, predicate: Any, what: str, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = await self.status(workflow_id)
            if predicate(last):
                return last
            await asyncio.sleep(0.2)
        raise AssertionError(f"{workflow_id}: no {what} within {timeout_s}s; last: {json.dumps(last)[:800]}")

    async def waiting_on(self, workflow_id: str, tier: str) -> dict[str, Any]:
        return await self.wait(
            workflow_id,
            lambda s: s.get("status") == "waiting" and (s.get("pending_approval") or {}).get("tier") == tier,
            f"wait for a {tier}",
        )

    async def ended(self, workflow_id: str) -> dict[str, Any]:
        return await self.wait(workflow_id, lambda s: s.get("status") in TERMINAL, "end")

    async def decide(
        self, approval_id: str, who: dict[str, str], decision: str, comment: str = ""
    ) -> httpx.Response:
        return await self.http.post(
            f"/v1/approvals/{approval_id}",
            json={"decision": decision, "comment": comment},
            headers=who,
        )

    async def stats(self) -> dict[str, Any]:
        return await self.stack.sandbox_stats()


def invoice(
    run: str, *, vendor: str = "vendor-acme", total: str = "1240.00", po_total: int = 150_000
) -> dict[str, Any]:
    return {
        "input": {
            "invoice_id": f"INV-{run}",
            "vendor_id": vendor,
            "document_text": (
                f"INVOICE INV-{run}\nVendor: {vendor}\nPO: PO-7781\n"
                f"40 x GPU hours @ 31.00 EUR\nTotal: {total} EUR"
            ),
            "purchase_order": {
                "po_number": "PO-7781",
                "vendor_id": vendor,
                "currency": "EUR",
                "total_cents": po_total,
                "cost_center": "cc-research",
            },
            "requester_ref": f"subject:{run}",
        },
        "subject_ref": f"subject:{run}",
    }


@pytest.fixture(scope="module")
async def world(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[World]:
    tmp = tmp_path_factory.mktemp("e2e")
    suffix = uuid.uuid4().hex[:8]
    registry = await isolated_registry(tmp, suffix, kafka_bootstrap)
    clock_file = tmp / "clock-offset"
    # Its own database: budgets, timers and gates start as configured, whatever earlier
    # runs and `make demo` spent or left pending in the shared one.
    database = f"chorus_e2e_{suffix}"
    stack = DevStack(
        tmp / "logs",
        env={
            "CHORUS_SCHEMAS_DIR": str(registry.root),
            "CHORUS_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "CHORUS_DATABASE_URL": (world_url := await create_database(database_url, database)),
            "CHORUS_CLOCK": f"offset-file:{clock_file}",
        },
        sandbox_args=["--flaky-source", "beta"],
    )
    try:
        await stack.start()
        async with httpx.AsyncClient(base_url=stack.api_url, timeout=10.0) as http:
            yield World(stack, clock_file, http, world_url)
    finally:
        await stack.stop()
        await drop_database(database_url, database)


@pytest.fixture
async def world_pg(world: World) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the services' database, to look at their rows."""
    conn = await asyncpg.connect(world.database_url)
    try:
        yield conn
    finally:
        await conn.close()


async def test_procurement_escalates_on_simulated_time_then_the_director_approves_and_it_pays(
    world: World,
) -> None:
    run = uuid.uuid4().hex[:8]
    accepted = await world.submit("procurement", invoice(run))
    assert accepted.status_code == 202
    body = accepted.json()
    assert accepted.headers["location"] == body["status_url"]
    workflow_id = body["workflow_id"]

    status = await world.waiting_on(workflow_id, "manager")
    assert status["waiting_for"].startswith("approval")
    world.advance(8 * HOUR + 60)  # the manager's whole window passes
    status = await world.waiting_on(workflow_id, "director")
    approval_id = status["pending_approval"]["approval_id"]

    too_late = await world.decide(approval_id, MANAGER, "approve")
    assert too_late.status_code == 403
    assert too_late.headers["content-type"].startswith("application/problem+json")
    assert (await world.decide(approval_id, DIRECTOR, "approve", "fine")).status_code == 202

    final = await world.ended(workflow_id)
    assert final["status"] == "completed"
    # One trace from the submission through the timers and the reviewer's decision to payment.
    traces = {entry["trace_id"] for entry in final["timeline"]}
    assert len(traces) == 1, traces
    result = await world.http.get(f"/v1/workflows/{workflow_id}/result", headers=SUBMITTER)
    assert result.json()["result"]["amount_cents"] == 124_000
    stats = await world.stats()
    paid = [p for p in stats["payments"]["by_key"].values() if p["invoice_id"] == f"INV-{run}"]
    assert len(paid) == 1
    again = await world.decide(approval_id, DIRECTOR, "approve")
    assert again.status_code == 409


async def test_no_answer_from_any_tier_auto_rejects_and_releases_the_budget(
    world: World, world_pg: asyncpg.Connection
) -> None:
    run = uuid.uuid4().hex[:8]
    workflow_id = (await world.submit("procurement", invoice(run))).json()["workflow_id"]
    await world.waiting_on(workflow_id, "manager")
    world.advance(8 * HOUR + 60)
    await world.waiting_on(workflow_id, "director")
    world.advance(8 * HOUR + 60)
    final = await world.ended(workflow_id)
    assert final["status"] == "rejected"
    reservation = await world_pg.fetchrow(
        "SELECT status FROM budget_agent.reservations WHERE workflow_id = $1", workflow_id
    )
    assert reservation is not None and reservation["status"] == "released"


async def test_same_idempotency_key_twice_starts_one_workflow(world: World) -> None:
    run = uuid.uuid4().hex[:8]
    first = await world.submit("procurement", invoice(run), key=f"key-{run}")
    second = await world.submit("procurement", invoice(run), key=f"key-{run}")
    assert first.status_code == second.status_code == 202
    assert first.json()["workflow_id"] == second.json()["workflow_id"]
    assert second.headers.get("idempotent-replayed") == "true"
    different = await world.submit("procurement", invoice(run, total="1000.00"), key=f"key-{run}")
    assert different.status_code == 409


async def test_payment_agent_killed_mid_request_pays_exactly_once(world: World) -> None:
    run = uuid.uuid4().hex[:8]
    # The next payment request reaches the provider, which pays; the agent dies before recording it.
    await world.stack.restart("payment_agent", {"CHORUS_FAULTS": "mid_external_call:1"})
    workflow_id = (await world.submit("procurement", invoice(run))).json()["workflow_id"]
    status = await world.waiting_on(workflow_id, "manager")
    assert (
        await world.decide(status["pending_approval"]["approval_id"], MANAGER, "approve")
    ).status_code == 202
    assert await world.stack.wait_exit("payment_agent") == -9
    await world.stack.restart("payment_agent")
    final = await world.ended(workflow_id)
    assert final["status"] == "completed"
    stats = await world.stats()
    keys = [k for k, p in stats["payments"]["by_key"].items() if p["invoice_id"] == f"INV-{run}"]
    assert len(keys) == 1  # one payment...
    assert stats["payment_requests"][keys[0]] == 2  # ...although the provider was asked twice


async def test_persistently_failing_payment_releases_the_budget(
    world: World, world_pg: asyncpg.Connection
) -> None:
    run = uuid.uuid4().hex[:8]
    before = await world_pg.fetchval(
        "SELECT reserved_cents FROM budget_agent.budgets WHERE cost_center = 'cc-research'"
    )
    workflow_id = (await world.submit("procurement", invoice(run, vendor="vendor-closed"))).json()[
        "workflow_id"
    ]
    status = await world.waiting_on(workflow_id, "manager")
    await world.decide(status["pending_approval"]["approval_id"], MANAGER, "approve")
    final = await world.ended(workflow_id)
    assert final["status"] == "compensated"
    reservation = await world_pg.fetchrow(
        "SELECT status, amount_cents FROM budget_agent.reservations WHERE workflow_id = $1",
        workflow_id,
    )
    assert reservation["status"] == "released"
    after = await world_pg.fetchval(
        "SELECT reserved_cents FROM budget_agent.budgets WHERE cost_center = 'cc-research'"
    )
    assert after == before  # the reservation came back in full
    events = [item["event_type"] for item in final["timeline"]]
    assert events.index("payment.failed") < events.index("budget.released")


async def test_wrong_tier_gets_403_and_the_workflow_stays_paused(world: World) -> None:
    run = uuid.uuid4().hex[:8]
    workflow_id = (await world.submit("procurement", invoice(run))).json()["workflow_id"]
    status = await world.waiting_on(workflow_id, "manager")
    approval_id = status["pending_approval"]["approval_id"]
    forbidden = await world.decide(approval_id, EDITOR, "approve")
    assert forbidden.status_code == 403
    assert "manager" in forbidden.json()["detail"]
    unauthenticated = await world.http.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"})
    assert unauthenticated.status_code == 401
    await asyncio.sleep(1.0)
    still = await world.status(workflow_id)
    assert still["status"] == "waiting" and still["pending_approval"]["tier"] == "manager"
    listed = (await world.http.get("/v1/approvals?assignee=me", headers=MANAGER)).json()["approvals"]
    mine = [a for a in listed if a["approval_id"] == approval_id]
    assert mine and mine[0]["context"]["summary"].startswith(f"Invoice INV-{run}")


async def test_report_resumes_at_source_three_after_a_crash_and_is_delivered(world: World) -> None:
    topic = f"resume-{uuid.uuid4().hex[:8]}"
    sandbox = world.stack.sandbox_url
    body = {
        "input": {
            "topic": topic,
            "sources": [{"name": n, "url": f"{sandbox}/sources/{n}"} for n in ("alpha", "gamma", "delta")],
            "delivery_url": f"{sandbox}/deliveries",
        },
        "callback_url": f"{sandbox}/hooks/report",
    }
    # The third external call (source 3) is answered, then the agent dies before recording it.
    await world.stack.restart("report_agent", {"CHORUS_FAULTS": "mid_external_call:3"})
    workflow_id = (await world.submit("research_report", body)).json()["workflow_id"]
    assert await world.stack.wait_exit("report_agent") == -9
    await world.stack.restart("report_agent")
    status = await world.waiting_on(workflow_id, "editor")
    calls = (await world.stats())["source_calls_by_topic"]
    assert (calls[f"{topic}/alpha"], calls[f"{topic}/gamma"], calls[f"{topic}/delta"]) == (1, 1, 2)
    await world.decide(status["pending_approval"]["approval_id"], EDITOR, "approve")
    final = await world.ended(workflow_id)
    assert final["status"] == "completed"
    stats = await world.stats()
    hooks = [h for h in stats["webhooks"] if h["body"]["workflow_id"] == workflow_id]
    assert len(hooks) == 1 and hooks[0]["signature_valid"]
    assert hooks[0]["body"]["outcome"] == "completed"


async def test_invalid_submissions_are_problem_json_naming_the_field(world: World) -> None:
    bad = invoice("x")
    bad["input"]["purchase_order"]["total_cents"] = "lots"
    response = await world.submit("procurement", bad)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["errors"][0]["pointer"] == "/input/purchase_order/total_cents"
    unknown = await world.http.get("/v1/workflows/wf-does-not-exist", headers=SUBMITTER)
    assert unknown.status_code == 404
    no_type = await world.submit("teleport", {"input": {}})
    assert no_type.status_code == 404
    openapi = (await world.http.get("/openapi.json")).json()
    assert {"/v1/workflows/{workflow_type}", "/v1/approvals/{approval_id}"} <= set(openapi["paths"])
