"""The reference workflows end to end: every service its own process, real Kafka and PostgreSQL.

Time is simulated for all processes at once (an offset file every service's clock
reads), so 8-hour approval windows pass in seconds.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from chorus.base.clock import OffsetFileClock
from chorus.base.errors import DecodeError
from chorus.base.settings import demo_key_service_credential
from chorus.contracts.approvals import ApprovalContext, ApprovalRequested, EscalationStep
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import ResetRequested, WorkflowEnded
from chorus.contracts.platform import FireTarget, OriginalRecord, RetryDue, TimerSchedule, WorkflowsRetired
from chorus.contracts.procurement import (
    BudgetReserved,
    InvoiceLine,
    InvoiceLineAdded,
    InvoiceReceived,
    InvoiceValidated,
)
from chorus.contracts.registry import Registry
from chorus.kernel.codec import decode, encode
from chorus.tools.devstack import SERVICES, DevStack
from chorus.web.apikeys import DEMO_KEYS, bearer
from tests.support.apis import BAD_HEADER_LINES, names, probes, raw_head, schemathesis, trust
from tests.support.database import connected
from tests.support.examples import example
from tests.support.hostile import SCRIPTS, corpus
from tests.support.kafka import (
    dump_topics,
    events_of,
    local_signer,
    publish,
    read_to_end,
    read_topic,
    stated_by,
)
from tests.support.kafka import envelope as envelope_of
from tests.support.processes import chorus
from tests.support.sealed import opened
from tests.support.stacks import own_stack
from tests.support.submissions import procurement
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

SUBMITTER = {"Authorization": "Bearer demo-submitter-key"}
MANAGER = {"Authorization": "Bearer demo-manager-key"}
DIRECTOR = {"Authorization": "Bearer demo-director-key"}
EDITOR = {"Authorization": "Bearer demo-editor-key"}
OPERATOR = {"Authorization": "Bearer demo-operator-key"}
AUDITOR = {"Authorization": "Bearer demo-auditor-key"}
GATEWAY = {"Authorization": "Bearer demo-gateway-key"}
OTHER_SUBMITTER = {"Authorization": "Bearer e2e-other-submitter-key"}
# The demo submitter's own reviewer key: the person who submits may also review others' work.
SELF_REVIEWER = {"Authorization": "Bearer e2e-self-review-key"}
API_KEYS = {
    **{key: api_key.model_dump() for key, api_key in DEMO_KEYS.items()},
    "e2e-other-submitter-key": {"principal": "olga.other", "role": "submitter"},
    "e2e-self-review-key": {"principal": "demo-submitter", "role": "reviewer", "tier": "manager"},
}
HOUR = 3600.0
TERMINAL = {"completed", "rejected", "failed", "compensated", "timed_out", "cancelled", "erased"}


@dataclass
class World:
    stack: DevStack
    clock_file: Path
    http: httpx.AsyncClient
    database_url: str
    """The services' own database (see the world fixture)."""
    registry: Registry
    kafka: str

    @property
    def key_service(self) -> str:
        """The stack's own key service (its TLS API): its keys open what its services sealed."""
        return self.stack.key_service_url

    def advance(self, seconds: float) -> None:
        OffsetFileClock.advance(self.clock_file, seconds)

    async def submit(
        self, workflow_type: str, body: dict[str, Any], key: str | None = None
    ) -> httpx.Response:
        headers = {**SUBMITTER, **({"Idempotency-Key": key} if key else {})}
        return await self.http.post(f"/v1/workflows/{workflow_type}", json=body, headers=headers)

    async def status(self, workflow_id: str, who: dict[str, str] = SUBMITTER) -> dict[str, Any]:
        response = await self.http.get(f"/v1/workflows/{workflow_id}", headers=who)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def wait(
        self,
        workflow_id: str,
        predicate: Any,
        what: str,
        timeout_s: float = 60.0,
        who: dict[str, str] = SUBMITTER,
    ) -> dict[str, Any]:
        status: dict[str, Any] = await wait_until(
            lambda: self.status(workflow_id, who),
            until=predicate,
            timeout_s=timeout_s,
            interval_s=0.2,
            what=f"{what} of {workflow_id}",
        )
        return status

    async def waiting_on(self, workflow_id: str, tier: str) -> dict[str, Any]:
        return await self.wait(
            workflow_id,
            lambda s: s.get("status") == "waiting" and (s.get("pending_approval") or {}).get("tier") == tier,
            f"wait for a {tier}",
        )

    async def awaiting_manager(self, body: dict[str, Any]) -> tuple[str, str]:
        """``body`` submitted as a procurement, once it waits for a manager's decision:
        (workflow id, approval id)."""
        workflow_id = (await self.submit("procurement", body)).json()["workflow_id"]
        status = await self.waiting_on(workflow_id, "manager")
        return workflow_id, status["pending_approval"]["approval_id"]

    async def ended(self, workflow_id: str, who: dict[str, str] = SUBMITTER) -> dict[str, Any]:
        return await self.wait(workflow_id, lambda s: s.get("status") in TERMINAL, "end", who=who)

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


# The purchase orders on record with the budget agent (its CHORUS_PURCHASE_ORDERS). Every
# test's invoices go against the first two, so they have room for all of them; the third
# holds one 1,240 EUR invoice.
PURCHASE_ORDERS: list[dict[str, Any]] = [
    {
        "po_number": po,
        "vendor_id": vendor,
        "currency": "EUR",
        "total_cents": total,
        "cost_center": "cc-research",
    }
    for po, vendor, total in (
        ("PO-7781", "vendor-acme", 100 * 150_000),
        ("PO-7790", "vendor-closed", 100 * 150_000),
        ("PO-7799", "vendor-acme", 150_000),
    )
]
PO_OF = {"vendor-acme": "PO-7781", "vendor-closed": "PO-7790"}
SMALL_PO = "PO-7799"


def invoice(
    run: str, *, vendor: str = "vendor-acme", po: str | None = None, item: str = "GPU hours", **more: str
) -> dict[str, Any]:
    """A procurement of ``vendor``'s invoice for 40 ``item`` at 31.00 EUR, against its
    purchase order on record unless ``po``."""
    po = po or PO_OF.get(vendor, "PO-7781")
    return procurement(run, vendor=vendor, po=po, line=f"40 x {item} @ 31.00 EUR", **more)


@pytest.fixture(scope="module")
async def world(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[World]:
    tmp = tmp_path_factory.mktemp("e2e")
    clock_file = tmp / "clock-offset"
    # Its own database: budgets, timers and gates start as configured, whatever earlier
    # runs and `make demo` spent or left pending in the shared one. Each service runs as
    # its own principal.
    async with (
        own_stack(
            tmp,
            kafka_bootstrap,
            database_url,
            name="e2e",
            services=SERVICES,
            env={"CHORUS_CLOCK": f"offset-file:{clock_file}"},
            service_env={
                "gateway": {"CHORUS_API_KEYS": json.dumps(API_KEYS)},
                "budget_agent": {"CHORUS_PURCHASE_ORDERS": json.dumps(PURCHASE_ORDERS)},
            },
            sandbox_args=["--flaky-source", "beta"],
        ) as own,
        httpx.AsyncClient(base_url=own.stack.api_url, timeout=10.0) as http,
    ):
        yield World(own.stack, clock_file, http, own.database_url, own.registry, kafka_bootstrap)


@pytest.fixture
async def world_pg(world: World) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the services' database, to look at their rows."""
    async with connected(world.database_url) as conn:
        yield conn


async def test_every_service_connects_as_its_own_role_never_the_superuser(
    world: World, world_pg: asyncpg.Connection
) -> None:
    logins = await world_pg.fetch(
        """SELECT DISTINCT a.usename, r.rolsuper FROM pg_stat_activity a JOIN pg_roles r ON r.oid = a.usesysid
            WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()"""
    )
    services = set(world.stack.database_roles)
    assert services == set(SERVICES)  # every service that keeps data
    assert {r["usename"] for r in logins} == services  # nobody else: the test's own is excluded
    assert not any(r["rolsuper"] for r in logins)


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


async def test_a_workflow_past_its_deadline_while_waiting_for_approval_times_out_everywhere(
    world: World, world_pg: asyncpg.Connection
) -> None:
    """Workflow tier, on simulated time: a four-hour deadline passes while the manager (an
    eight-hour window) has not answered. The workflow ends timed_out, the budget is
    released, the approval leaves the manager's list, its escalation timer is cancelled,
    and the manager's late approval is refused saying why."""
    run = uuid.uuid4().hex[:8]
    workflow_id, approval_id = await world.awaiting_manager({**invoice(run), "deadline_s": 4 * HOUR})
    world.advance(4 * HOUR + 60)
    final = await world.ended(workflow_id)
    assert final["status"] == "timed_out"
    events = [item["event_type"] for item in final["timeline"]]
    assert "approval.escalated" not in events and "payment.issued" not in events
    released = await world.wait(
        workflow_id,
        lambda s: any(i["event_type"] == "budget.released" for i in s["timeline"]),
        "the budget released",
    )
    [release] = [i["payload"] for i in released["timeline"] if i["event_type"] == "budget.released"]
    assert release["reason"] == "workflow timed_out"
    queue = (await world.http.get("/v1/approvals", headers=MANAGER)).json()["approvals"]
    assert approval_id not in {a["approval_id"] for a in queue}
    late = await world.decide(approval_id, MANAGER, "approve", "sorry, was away")
    assert late.status_code == 409
    assert late.json()["title"] == "Approval withdrawn"
    assert "the workflow ended (timed_out)" in late.json()["detail"]
    escalation = await world_pg.fetchval(
        "SELECT status FROM timer_service.timers WHERE workflow_id = $1 AND purpose = 'escalation'",
        workflow_id,
    )
    assert escalation == "cancelled"
    reservation = await world_pg.fetchval(
        "SELECT status FROM budget_agent.reservations WHERE workflow_id = $1", workflow_id
    )
    assert reservation == "released"


async def test_a_deadline_longer_than_the_types_is_refused_naming_the_field(world: World) -> None:
    response = await world.submit("procurement", {**invoice("long"), "deadline_s": 30 * 86400})
    assert response.status_code == 422
    problem = response.json()
    assert problem["errors"][0]["pointer"] == "/deadline_s"
    assert "604800" in problem["detail"]  # the procurement type's seven days


async def test_cancel_ends_the_workflow_cancelled_releases_its_budget_and_is_idempotent(
    world: World, world_pg: asyncpg.Connection
) -> None:
    run = uuid.uuid4().hex[:8]
    workflow_id, approval_id = await world.awaiting_manager(invoice(run))
    path = f"/v1/workflows/{workflow_id}/cancel"
    reason = {"reason": "ordered against the wrong purchase order"}
    assert (await world.http.post(path, json=reason, headers=OTHER_SUBMITTER)).status_code == 404
    assert (await world.http.post(path, json=reason, headers=MANAGER)).status_code == 403
    empty = await world.http.post(path, json={"reason": ""}, headers=SUBMITTER)
    assert empty.status_code == 422 and empty.json()["errors"][0]["pointer"] == "/reason"

    first = await world.http.post(path, json=reason, headers=SUBMITTER)
    assert first.status_code == 202, first.text
    assert first.json()["status"] == "cancelling" and "idempotent-replayed" not in first.headers
    again = await world.http.post(path, json={"reason": "second thoughts"}, headers=SUBMITTER)
    # 202 while it is being cancelled, 200 once it is: which one depends on how fast the
    # services stop it (sealing keys now come from cache), never on the second request.
    assert again.headers["idempotent-replayed"] == "true"
    assert (again.status_code, again.json()["status"]) in ((202, "cancelling"), (200, "cancelled"))
    assert again.json()["reason"] == reason["reason"]  # the first request stands

    final = await world.ended(workflow_id)
    assert final["status"] == "cancelled"
    # Who cancelled and why are personal data: in the (sealed) reason, not the result.
    assert final["result"] == {"cancelled": True}
    assert final["outcome_reason"] == f"cancelled by demo-submitter: {reason['reason']}"
    assert (await world.http.post(path, json=reason, headers=SUBMITTER)).status_code == 200
    late = await world.decide(approval_id, MANAGER, "approve")
    assert late.status_code == 409 and "the workflow ended (cancelled)" in late.json()["detail"]
    reservation = await world.wait(
        workflow_id,
        lambda s: any(i["event_type"] == "budget.released" for i in s["timeline"]),
        "the budget released",
    )
    assert [i["event_type"] for i in reservation["timeline"]].count("workflow.ended") == 1
    assert (
        await world_pg.fetchval(
            "SELECT status FROM budget_agent.reservations WHERE workflow_id = $1", workflow_id
        )
        == "released"
    )


async def test_an_operator_cancels_from_the_cli_and_a_workflow_that_ended_otherwise_is_refused(
    world: World,
) -> None:
    run = uuid.uuid4().hex[:8]
    running = (await world.submit("procurement", invoice(run))).json()["workflow_id"]
    await world.waiting_on(running, "manager")
    code, out, err = await chorus_cli(world, "workflows", "cancel", running, "--reason", "duplicate order")
    assert code == 0, err
    assert out.startswith(f"{running}: cancelling (asked by sam.operator")
    assert (await world.ended(running))["status"] == "cancelled"

    rejected = (await world.submit("procurement", invoice(run, po="PO-0000"))).json()["workflow_id"]
    assert (await world.ended(rejected))["status"] == "rejected"
    code, out, err = await chorus_cli(world, "workflows", "cancel", rejected, "--reason", "too late")
    assert code == 1
    assert "Already ended" in err and "rejected" in err


async def chorus_cli(world: World, *args: str) -> tuple[int, str, str]:
    """The ``chorus`` console script against this world's gateway, as the demo operator."""
    return await chorus(*args, env={"CHORUS_GATEWAY_URL": world.stack.api_url})


async def test_a_policy_change_through_the_api_routes_the_next_approval_without_a_restart(
    world: World,
) -> None:
    """The operator lowers the "director from the start" threshold to 1,000 EUR through the
    gateway: the next 1,240 EUR invoice waits on the director at once (the manager's
    chain is the budget agent's own). The change is a new version, with who and why."""
    before = await world.http.get("/v1/approval-policy", headers=OPERATOR)
    assert before.status_code == 200, before.text
    rules = before.json()["rules"]
    large = next(r for r in rules if r["name"] == "large procurement: director")
    assert large["when"]["amount_cents_at_least"] == 1_000_000  # the default: 10,000 EUR
    lowered = [
        {**r, "when": {**r["when"], "amount_cents_at_least": 100_000}} if r is large else r for r in rules
    ]
    try:
        changed = await world.http.put(
            "/v1/approval-policy", json={"rules": lowered, "reason": "audit finding 7"}, headers=OPERATOR
        )
        assert changed.status_code == 200, changed.text
        assert changed.json()["version"] == before.json()["version"] + 1
        assert changed.json()["changed_by"] == "sam.operator"

        workflow_id = (await world.submit("procurement", invoice(uuid.uuid4().hex[:8]))).json()["workflow_id"]
        status = await world.waiting_on(workflow_id, "director")
        [routed] = of_type(status, "approval.routed")
        assert (
            routed["rule"] == "large procurement: director"
            and routed["policy_version"] == changed.json()["version"]
        )
        await world.decide(status["pending_approval"]["approval_id"], DIRECTOR, "approve")
        assert (await world.ended(workflow_id))["status"] == "completed"

        history = (await world.http.get("/v1/approval-policy/history", headers=AUDITOR)).json()["versions"]
        assert (history[0]["changed_by"], history[0]["reason"]) == ("sam.operator", "audit finding 7")
        code, out, _ = await chorus_cli(world, "policy", "show")
        assert code == 0 and "amount_cents_at_least=100000" in out
    finally:
        restored = await world.http.put(
            "/v1/approval-policy", json={"rules": rules, "reason": "back to the default"}, headers=OPERATOR
        )
        assert restored.status_code == 200


async def test_a_policy_rule_with_a_field_it_does_not_know_is_refused_naming_it(world: World) -> None:
    rule = {"name": "typo", "when": {"amount_at_least": 5}, "chain": [{"tier": "director", "window_s": 60}]}
    refused = await world.http.put(
        "/v1/approval-policy", json={"rules": [rule], "reason": "x"}, headers=OPERATOR
    )
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["pointer"] == "/rules/0/when/amount_at_least"
    forbidden = await world.http.put(
        "/v1/approval-policy", json={"rules": [], "reason": "x"}, headers=MANAGER
    )
    assert forbidden.status_code == 403


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
    workflow_id, approval_id = await world.awaiting_manager(invoice(run))
    assert (await world.decide(approval_id, MANAGER, "approve")).status_code == 202
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
    workflow_id, approval_id = await world.awaiting_manager(invoice(run, vendor="vendor-closed"))
    await world.decide(approval_id, MANAGER, "approve")
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


async def approve_and_end(world: World, workflow_id: str) -> dict[str, Any]:
    status = await world.waiting_on(workflow_id, "manager")
    assert (
        await world.decide(status["pending_approval"]["approval_id"], MANAGER, "approve")
    ).status_code == 202
    return await world.ended(workflow_id)


async def rejection(world: World, workflow_id: str) -> dict[str, Any]:
    """The invoice.rejected of a workflow that ended rejected. The rejection and the end are on
    two topics, so the audit projection may show the end first: wait for both."""

    def rejected(status: dict[str, Any]) -> bool:
        ended = status.get("status") in TERMINAL
        return ended and (
            status["status"] != "rejected"  # ended otherwise: the assertion below says so now
            or any(item["event_type"] == "invoice.rejected" for item in status.get("timeline", []))
        )

    final = await world.wait(workflow_id, rejected, "the rejection and the end")
    assert final["status"] == "rejected", final["status"]
    [event] = [item for item in final["timeline"] if item["event_type"] == "invoice.rejected"]
    payload: dict[str, Any] = event["payload"]
    return payload


async def test_the_same_invoice_submitted_again_is_paid_once_and_the_second_is_a_duplicate(
    world: World,
) -> None:
    run = uuid.uuid4().hex[:8]
    first = (await world.submit("procurement", invoice(run))).json()["workflow_id"]
    assert (await approve_and_end(world, first))["status"] == "completed"
    # Another workflow for the same invoice: as its own submission, in other letter case.
    again = (await world.submit("procurement", invoice(run, number=f"inv-{run}"))).json()["workflow_id"]
    assert again != first
    assert (await rejection(world, again))["code"] == "duplicate_invoice"
    paid = [
        p
        for p in (await world.stats())["payments"]["by_key"].values()
        if p["invoice_id"].casefold() == f"inv-{run}"
    ]
    assert len(paid) == 1


async def test_an_invoice_refused_by_the_provider_may_be_submitted_again_and_is_paid(world: World) -> None:
    run = uuid.uuid4().hex[:8]
    refused = (await world.submit("procurement", invoice(run, vendor="vendor-closed"))).json()["workflow_id"]
    assert (await approve_and_end(world, refused))["status"] == "compensated"
    again = (await world.submit("procurement", invoice(run, vendor="vendor-closed"))).json()["workflow_id"]
    status = await world.waiting_on(again, "manager")  # not a duplicate: nothing was paid
    assert status["status"] == "waiting"


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"po": "PO-0000"}, "unknown_po"),
        ({"vendor": "vendor-evil", "po": "PO-7781"}, "vendor_mismatch"),
        ({"total": "1600.00", "po": SMALL_PO}, "over_po"),
    ],
)
async def test_an_invoice_its_purchase_order_on_record_does_not_cover_is_rejected(
    world: World, change: dict[str, str], code: str
) -> None:
    run = uuid.uuid4().hex[:8]
    body = invoice(run, **change)
    if "total" in change:  # 40 lines at 40.00 add up to it, so only the PO refuses it
        body["input"]["document_text"] = body["input"]["document_text"].replace("@ 31.00", "@ 40.00")
    workflow_id = (await world.submit("procurement", body)).json()["workflow_id"]
    assert (await rejection(world, workflow_id))["code"] == code


async def test_invoices_against_one_purchase_order_may_not_together_exceed_it(world: World) -> None:
    """1,500 EUR on the order: a 1,240 EUR invoice waiting for approval holds it, so a second
    one is refused (before, each was checked against the whole order and both could be
    paid); once the first is rejected its share is free again."""
    first_id, first_approval = await world.awaiting_manager(invoice(uuid.uuid4().hex[:8], po=SMALL_PO))
    second_id = (await world.submit("procurement", invoice(uuid.uuid4().hex[:8], po=SMALL_PO))).json()
    refused = await rejection(world, second_id["workflow_id"])
    assert refused["code"] == "over_po"
    assert f"{SMALL_PO} has 26000 of 150000 left" in refused["reasons"][0]

    assert (await world.decide(first_approval, MANAGER, "reject")).status_code == 202
    assert (await world.ended(first_id))["status"] == "rejected"
    third_id, third_approval = await world.awaiting_manager(invoice(uuid.uuid4().hex[:8], po=SMALL_PO))
    assert (await world.decide(third_approval, MANAGER, "reject")).status_code == 202
    assert (await world.ended(third_id))["status"] == "rejected"


async def test_wrong_tier_gets_403_and_the_workflow_stays_paused(world: World) -> None:
    run = uuid.uuid4().hex[:8]
    workflow_id, approval_id = await world.awaiting_manager(invoice(run))
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


async def test_each_caller_reads_only_the_workflows_it_may_and_every_read_is_logged(world: World) -> None:
    run = uuid.uuid4().hex[:8]
    workflow_id = (await world.submit("procurement", invoice(run))).json()["workflow_id"]
    await world.waiting_on(workflow_id, "manager")

    def read(who: dict[str, str]) -> Any:
        return world.http.get(f"/v1/workflows/{workflow_id}", headers=who)

    # Its submitter, the tier it waits on, operators and auditors see it ...
    for allowed in (SUBMITTER, MANAGER, OPERATOR, AUDITOR):
        assert (await read(allowed)).status_code == 200
    # ... another submitter, another tier and a service key learn nothing, not even that
    # it exists (the gateway's own key reads the audit projection, not its users' API).
    for denied in (OTHER_SUBMITTER, EDITOR, GATEWAY):
        answer = await read(denied)
        assert answer.status_code == 404 and answer.json()["title"] == "Unknown workflow"
    result = await world.http.get(f"/v1/workflows/{workflow_id}/result", headers=OTHER_SUBMITTER)
    assert result.status_code == 404

    reads = [
        line
        for line in (
            json.loads(text)
            for text in world.stack.procs["gateway"].log_path.read_text().splitlines()
            if text.startswith("{")
        )
        if line.get("msg") == "workflow read" and line.get("workflow_id") == workflow_id
    ]
    who = {(r["principal"], r["read"], r["allowed"]) for r in reads}
    assert ("olga.other", "status", False) in who and ("olga.other", "result", False) in who
    assert ("dana.manager", "status", True) in who and ("lee.editor", "status", False) in who
    assert ("ava.auditor", "status", True) in who


async def test_whoever_submitted_cannot_decide_its_approval_even_with_a_reviewer_key(world: World) -> None:
    run = uuid.uuid4().hex[:8]
    workflow_id, approval_id = await world.awaiting_manager(invoice(run))
    own = await world.decide(approval_id, SELF_REVIEWER, "approve")
    assert own.status_code == 403
    assert own.json()["title"] == "Separation of duties"
    assert "another reviewer" in own.json()["detail"]
    assert (await world.decide(approval_id, MANAGER, "approve")).status_code == 202
    assert (await world.ended(workflow_id))["status"] == "completed"


async def refused_by(world: World, service: str, event_ids: set[str]) -> None:
    """Until ``service`` dead-lettered a record of each of ``event_ids`` as unauthorized:
    it read each one and acted on none."""
    letters: dict[tuple[int, int], tuple[str, str, str]] = {}

    def refused(records: list[Any]) -> bool:
        for record in records:
            if (record.partition, record.offset) not in letters:
                letter = json.loads(record.value)["payload"]
                try:
                    value = base64.b64decode(opened(letter["original"], world.key_service)["value_b64"])
                    event_id = str(json.loads(value)["event_id"])
                except httpx.HTTPStatusError as exc:  # an erased subject's letter: its key is gone
                    assert exc.response.status_code == 410, exc
                    event_id = "?"
                except (ValueError, KeyError, TypeError, RecursionError):  # hostile records' letters too
                    event_id = "?"
                letters[(record.partition, record.offset)] = (
                    letter["service"],
                    letter["error"]["category"],
                    event_id,
                )
        return event_ids <= {e for s, c, e in letters.values() if (s, c) == (service, "unauthorized")}

    topic = world.registry.physical_topic("event.dead_lettered")
    try:
        await read_topic(world.kafka, [topic], until=refused, timeout_s=90)
    except AssertionError:
        mine = sorted(v for v in letters.values() if v[2] in event_ids)
        raise AssertionError(
            f"{service} did not refuse all of {sorted(event_ids)}; letters of them: {mine}"
        ) from None


def as_retry_of(world: World, service: str, forged: Envelope) -> Envelope:
    """``forged`` carried in a durable retry addressed to ``service`` (its consumer group):
    what any principal that may write chorus.control can publish."""
    original = OriginalRecord(
        topic=world.registry.physical_topic(forged.event_type),
        partition=0,
        offset=forged.event_id.int % 2**40,  # a dead letter is named by the record's position
        key_b64=base64.b64encode(forged.workflow_id.encode()).decode(),
        value_b64=base64.b64encode(encode(forged)).decode(),
    )
    due = RetryDue(service=service, consumer_group=service, attempt=2, original=original, failures=[])
    return stated_by(envelope_of(due, workflow_id=forged.workflow_id, workflow_type="procurement"), service)


def as_timer_of(world: World, service: str, forged: Envelope) -> Envelope:
    """``forged`` as the event of a timer already due, claiming ``service`` scheduled it."""
    fire = FireTarget(
        topic=world.registry.physical_topic(forged.event_type),
        key=forged.workflow_id,
        value=forged.model_dump(mode="json"),
    )
    schedule = TimerSchedule(
        timer_id=f"{service}:{forged.workflow_id}:forged-{forged.event_id}",
        due_at=datetime.now(timezone.utc) - timedelta(days=1),
        fire=fire,
        purpose="escalation",
    )
    return stated_by(
        envelope_of(schedule, workflow_id=forged.workflow_id, workflow_type="procurement"), service
    )


async def test_a_forged_approval_request_on_its_topic_through_a_timer_or_a_retry_changes_nothing(
    world: World,
) -> None:
    """Whoever may write approvals.events, chorus.timers or chorus.control (every runtime
    service may) forges a request for a running procurement: a one-millisecond window that
    approves on its own, as if from the budget agent. None carries the budget agent's
    signature, so the gate refuses each one; the workflow waits for its manager as before,
    and the manager's approval pays it once."""
    run = uuid.uuid4().hex[:8]
    workflow_id, approval_id = await world.awaiting_manager(invoice(run))
    approvals = world.registry.physical_topic("approval.requested")

    def forged(how: str) -> Envelope:
        request = ApprovalRequested(
            approval_id=f"forged-{how}-{run}",
            requested_by="budget_agent",
            chain=[EscalationStep(tier="manager", window_s=0.001)],
            fallback="auto_approve",
            context=ApprovalContext(summary=f"Invoice INV-{run}: 1.00 EUR"),
        )
        made = envelope_of(request, workflow_id=workflow_id, workflow_type="procurement")
        return stated_by(
            made.model_copy(update={"occurred_at": datetime.now(timezone.utc) - timedelta(days=1)}),
            "budget_agent",
        )

    direct, timed, retried = forged("direct"), forged("timer"), forged("retry")
    await publish(world.kafka, approvals, [direct], sign=False)
    await publish(
        world.kafka,
        world.registry.physical_topic("timer.schedule"),
        [as_timer_of(world, "approval_gate", timed)],
    )
    await publish(
        world.kafka,
        world.registry.physical_topic("retry.due"),
        [as_retry_of(world, "approval_gate", retried)],
    )
    await refused_by(world, "approval_gate", {str(e.event_id) for e in (direct, timed, retried)})

    status = await world.waiting_on(workflow_id, "manager")
    assert status["pending_approval"]["approval_id"] == approval_id  # not superseded
    assert (await world.decide(approval_id, MANAGER, "approve")).status_code == 202
    assert (await world.ended(workflow_id))["status"] == "completed"
    paid = [
        p for p in (await world.stats())["payments"]["by_key"].values() if p["invoice_id"] == f"INV-{run}"
    ]
    assert [p["amount_cents"] for p in paid] == [124_000]


async def test_forged_money_facts_on_their_topic_or_through_a_retry_pay_nothing(world: World) -> None:
    """A running procurement waits for its manager; a forger restates its invoice (another
    vendor, a larger total) and the matching reservation, as if from the invoice and budget
    agents, on procurement.events and through a retry addressed to the payment agent alone.
    Neither is signed by its producer: the payment agent refuses all four, and the manager's
    approval pays what was really validated and reserved."""
    run = uuid.uuid4().hex[:8]
    workflow_id, approval_id = await world.awaiting_manager(invoice(run))
    validated = example(InvoiceValidated)
    extracted = validated.extracted.model_copy(update={"vendor_id": "vendor-evil", "total_cents": 9_999_900})
    restated = validated.model_copy(update={"invoice_id": f"INV-{run}", "extracted": extracted})
    reserved = BudgetReserved(
        invoice_id=f"INV-{run}",
        reservation_id=f"res-forged-{run}",
        cost_center="cc-research",
        amount_cents=9_999_900,
        currency="EUR",
    )

    def forged(fact: Any, producer: str) -> Envelope:
        return stated_by(envelope_of(fact, workflow_id=workflow_id, workflow_type="procurement"), producer)

    direct = [forged(restated, "invoice_agent"), forged(reserved, "budget_agent")]
    retried = [forged(restated, "invoice_agent"), forged(reserved, "budget_agent")]
    await publish(world.kafka, world.registry.physical_topic("invoice.validated"), direct, sign=False)
    retries = [as_retry_of(world, "payment_agent", fact) for fact in retried]
    await publish(world.kafka, world.registry.physical_topic("retry.due"), retries)
    await refused_by(world, "payment_agent", {str(e.event_id) for e in (*direct, *retried)})

    assert (await world.decide(approval_id, MANAGER, "approve")).status_code == 202
    assert (await world.ended(workflow_id))["status"] == "completed"
    paid = [
        p for p in (await world.stats())["payments"]["by_key"].values() if p["invoice_id"] == f"INV-{run}"
    ]
    assert [(p["amount_cents"], p["currency"]) for p in paid] == [(124_000, "EUR")]


async def test_a_retry_from_another_service_starts_nothing_in_the_service_it_names(world: World) -> None:
    """The source fetcher (its daily input is pages submitters choose) may write chorus.control
    but not procurement.events. A retry it addresses to the invoice agent, carrying an invoice
    of a workflow nobody submitted, would have the invoice agent alone read and validate it.
    A retry is its addressee's own record, signed by it: the invoice agent refuses the
    fetcher's, signed with the fetcher's key or claiming the agent's name, and nothing is
    stated about that workflow."""
    workflow_id = f"wf-forged-{uuid.uuid4().hex[:8]}"
    received = envelope_of(example(InvoiceReceived), workflow_id=workflow_id, workflow_type="procurement")
    in_its_own_name = stated_by(as_retry_of(world, "invoice_agent", received), "source_fetcher")
    in_the_agents_name = as_retry_of(world, "invoice_agent", received).model_copy(
        update={"event_id": uuid.uuid4()}
    )
    control = world.registry.physical_topic("retry.due")
    await publish(world.kafka, control, [in_its_own_name])  # signed by source_fetcher
    await publish(world.kafka, control, [in_the_agents_name], sign=False)
    await refused_by(
        world, "invoice_agent", {str(in_its_own_name.event_id), str(in_the_agents_name.event_id)}
    )

    # Everything on the topic up to now: the agent was past both retries before the refusals.
    records = await read_to_end(world.kafka, world.registry.physical_topic("invoice.validated"))
    stated = [
        e["event_type"]
        for t in ("invoice.validated", "invoice.rejected")
        for e in events_of(records, t)
        if e["workflow_id"] == workflow_id
    ]
    assert stated == []


async def test_a_start_request_not_from_the_gateway_starts_nothing(world: World) -> None:
    """The payment agent may write procurement.events (it states payments there). An invoice
    it published itself would start a procurement nobody submitted: no submitter, no
    deadline, nothing in the gateway, yet the invoice agent would validate it and the budget
    agent reserve for it. The start is the gateway's to state: under the payment agent's own
    signature or in the gateway's name unsigned, the invoice agent and the audit projection
    refuse it, and nothing is stated about either workflow."""
    forged = [
        envelope_of(
            example(InvoiceReceived),
            workflow_id=f"wf-unsubmitted-{uuid.uuid4().hex[:8]}",
            workflow_type="procurement",
        )
        for _ in range(2)
    ]
    own = stated_by(forged[0], "payment_agent")
    topic = world.registry.physical_topic("invoice.received")
    await publish(world.kafka, topic, [own], headers=[local_signer("payment_agent").header(encode(own))])
    await publish(world.kafka, topic, [forged[1]], sign=False)  # claims the gateway
    ids = {str(own.event_id), str(forged[1].event_id)}
    for service in ("invoice_agent", "audit_projector"):
        await refused_by(world, service, ids)

    records = await read_to_end(world.kafka, world.registry.physical_topic("invoice.validated"))
    workflows = {own.workflow_id, forged[1].workflow_id}
    stated = [e for t in ("invoice.validated", "invoice.rejected") for e in events_of(records, t)]
    assert [e["event_type"] for e in stated if e["workflow_id"] in workflows] == []
    for workflow_id in workflows:
        unknown = await world.http.get(f"/v1/workflows/{workflow_id}", headers=OPERATOR)
        assert unknown.status_code == 404, unknown.text


async def test_another_agents_own_signature_on_a_procurements_end_ends_nothing(world: World) -> None:
    """A compromised report agent states, under its own valid key, that a procurement waiting
    for its manager completed: the end that stops every service and makes the gateway tell
    the submitter it was paid. The report agent ends research reports only (workflows.yaml
    ended_by): the gateway, the payment and budget agents and the audit projection refuse
    it; the workflow still waits, and the manager's approval pays it once."""
    workflow_id, approval_id = await world.awaiting_manager(invoice(uuid.uuid4().hex[:8]))
    claimed = WorkflowEnded(outcome="completed", result={"paid": True}, ended_by="report_agent")
    ended = stated_by(
        envelope_of(claimed, workflow_id=workflow_id, workflow_type="procurement"), "report_agent"
    )
    await publish(world.kafka, world.registry.physical_topic("workflow.ended"), [ended])  # signed
    for service in ("gateway", "payment_agent", "budget_agent", "audit_projector"):
        await refused_by(world, service, {str(ended.event_id)})
    assert (await world.status(workflow_id))["status"] == "waiting"

    assert (await world.decide(approval_id, MANAGER, "approve")).status_code == 202
    final = await world.ended(workflow_id)
    assert final["status"] == "completed"
    ends = [e for e in final["timeline"] if e["event_type"] == "workflow.ended"]
    assert [e["payload"]["ended_by"] for e in ends] == ["payment_agent"]


@pytest.mark.parametrize(
    ("field", "url", "where", "kind"),
    [
        ("callback", "http://169.254.169.254/latest/meta-data/", "/callback_url", "link-local"),
        ("delivery", "http://127.0.0.1:5432/", "/input/delivery_url", "loopback"),
        ("source", "http://10.0.0.7/internal", "/input/sources/1/url", "private"),
    ],
)
async def test_a_url_into_the_deployments_own_network_is_refused_naming_the_field(
    world: World, field: str, url: str, where: str, kind: str
) -> None:
    sandbox = world.stack.sandbox_url
    sources = [{"name": n, "url": f"{sandbox}/sources/{n}"} for n in ("alpha", "beta")]
    body: dict[str, Any] = {
        "input": {
            "topic": f"ssrf-{uuid.uuid4().hex[:6]}",
            "sources": sources,
            "delivery_url": f"{sandbox}/deliveries",
        },
        "callback_url": f"{sandbox}/hooks/report",
    }
    if field == "callback":
        body["callback_url"] = url
    elif field == "delivery":
        body["input"]["delivery_url"] = url
    else:
        sources[1]["url"] = url
    refused = await world.submit("research_report", body)
    assert refused.status_code == 403, refused.text
    problem = refused.json()
    assert problem["title"] == "Forbidden target" and problem["errors"][0]["pointer"] == where
    assert kind in problem["detail"]


def research(world: World, topic: str, sources: dict[str, str], **extra: Any) -> dict[str, Any]:
    """A report request; ``sources`` maps each name to the sandbox source's query (?delay=...)."""
    sandbox = world.stack.sandbox_url
    return {
        "input": {
            "topic": topic,
            "sources": [{"name": n, "url": f"{sandbox}/sources/{n}{q}"} for n, q in sources.items()],
            "delivery_url": f"{sandbox}/deliveries",
            **extra,
        },
        "callback_url": f"{sandbox}/hooks/report",
    }


def of_type(status: dict[str, Any], event_type: str) -> list[dict[str, Any]]:
    return [item["payload"] for item in status["timeline"] if item["event_type"] == event_type]


async def test_sources_are_fetched_at_once_and_a_straggler_degrades_the_report_at_the_stage_deadline(
    world: World,
) -> None:
    """Stage tier, on simulated time: three sources fanned out at once (their calls overlap);
    two answer, the third straggles past the stage's 30-second deadline. The draft is
    built from the two and names the missing one; the straggler's late answer is recorded
    and changes nothing; the approved report says which source was missing."""
    topic = f"stage-{uuid.uuid4().hex[:8]}"
    sources = {"alpha": "?delay=1", "gamma": "?delay=1", "slow": "?delay=8"}
    # Within the fetcher's 60 s task timeout, which the moved clock would otherwise pass.
    body = research(world, topic, sources, sources_within_s=30)
    workflow_id = (await world.submit("research_report", body)).json()["workflow_id"]
    await world.wait(workflow_id, lambda s: len(of_type(s, "source.fetched")) == 2, "two sources in")
    world.advance(31)
    status = await world.waiting_on(workflow_id, "editor")
    [drafted] = of_type(status, "report.drafted")
    assert drafted["citations"] == ["alpha", "gamma"] and drafted["sources_missing"] == ["slow"]
    assert "missing: slow" in status["pending_approval"]["context"]["summary"]
    spans = {s["name"]: s for s in (await world.stats())["source_spans"] if s["topic"] == topic}
    # At once: every call began before the first one answered.
    assert max(spans[n]["started"] for n in sources) < min(spans[n]["ended"] for n in ("alpha", "gamma"))

    late = await world.wait(
        workflow_id, lambda s: len(of_type(s, "source.fetched")) == 3, "the straggler's late answer"
    )
    assert len(of_type(late, "report.drafted")) == 1  # recorded, nothing drafted again
    await world.decide(status["pending_approval"]["approval_id"], EDITOR, "approve")
    final = await world.ended(workflow_id)
    assert final["status"] == "completed" and final["result"]["sources_missing"] == ["slow"]


async def test_a_stage_with_policy_fail_ends_the_workflow_failed_at_its_deadline(world: World) -> None:
    topic = f"stage-fail-{uuid.uuid4().hex[:8]}"
    body = research(
        world, topic, {"alpha": "", "slow": "?delay=5"}, sources_within_s=60, sources_policy="fail"
    )
    workflow_id = (await world.submit("research_report", body)).json()["workflow_id"]
    await world.wait(workflow_id, lambda s: len(of_type(s, "source.fetched")) == 1, "alpha in")
    world.advance(61)
    final = await world.ended(workflow_id)
    assert final["status"] == "failed"
    assert final["result"] == {"sources_missing": ["slow"]}
    assert "deadline" in final["outcome_reason"]
    assert of_type(final, "report.drafted") == [] and of_type(final, "approval.requested") == []


async def test_the_fan_in_service_killed_mid_stage_resumes_and_asks_each_source_once(world: World) -> None:
    """The report agent dies right after committing the first source's answer (its second
    commit); restarted, it picks the stage up from its checkpoint."""
    topic = f"resume-{uuid.uuid4().hex[:8]}"
    body = research(world, topic, {"alpha": "", "gamma": "?delay=1", "delta": "?delay=2"})
    await world.stack.restart("report_agent", {"CHORUS_FAULTS": "after_db_commit:2"})
    workflow_id = (await world.submit("research_report", body)).json()["workflow_id"]
    assert await world.stack.wait_exit("report_agent") == -9
    await world.stack.restart("report_agent")
    status = await world.waiting_on(workflow_id, "editor")
    [drafted] = of_type(status, "report.drafted")
    assert drafted["citations"] == ["alpha", "gamma", "delta"] and drafted["sources_missing"] == []
    calls = (await world.stats())["source_calls_by_topic"]
    assert [calls[f"{topic}/{n}"] for n in ("alpha", "gamma", "delta")] == [1, 1, 1]
    await world.decide(status["pending_approval"]["approval_id"], EDITOR, "approve")
    final = await world.ended(workflow_id)
    assert final["status"] == "completed"
    stats = await world.stats()
    hooks = [h for h in stats["webhooks"] if h["body"]["workflow_id"] == workflow_id]
    assert len(hooks) == 1 and hooks[0]["signature_valid"]
    assert hooks[0]["body"]["outcome"] == "completed"


async def test_invalid_submissions_are_problem_json_naming_the_field(world: World) -> None:
    bad = invoice("x")
    bad["input"]["total_cents"] = "lots"
    response = await world.submit("procurement", bad)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["errors"][0]["pointer"] == "/input/total_cents"
    unknown = await world.http.get("/v1/workflows/wf-does-not-exist", headers=SUBMITTER)
    assert unknown.status_code == 404
    no_type = await world.submit("teleport", {"input": {}})
    assert no_type.status_code == 405  # /v1/workflows/teleport is a workflow's path (for GET)
    assert "known: ['procurement', 'research_report']" in no_type.json()["detail"]
    openapi = (await world.http.get("/openapi.json")).json()
    # One submit route per workflow type, each stating its own input schema.
    assert {
        "/v1/workflows/procurement",
        "/v1/workflows/research_report",
        "/v1/approvals/{approval_id}",
    } <= set(openapi["paths"])


# -- hostile parameters and headers, on every API --------------------------------------------

API_SERVICES = (
    "gateway",
    "deadletter_service",
    "audit_projector",
    "approval_gate",
    "key_service",
    "notifier",
    "rollout_service",
)


def api_of(world: World, name: str) -> tuple[str, str]:
    """Where ``name``'s API answers, and a key that reads it without changing anything
    (an auditor's; the key service's callers are services): every other test of this
    module shares the stack, so nothing here may redrive, re-pin or rewrite a policy."""
    if name == "gateway":
        return world.stack.api_url, "demo-auditor-key"
    if name == "key_service":
        return world.stack.key_service_url, demo_key_service_credential("gateway")
    url = (world.stack.procs[name].health_url or "").removesuffix("/health")
    return url, "demo-auditor-key"


async def test_a_key_service_credential_opens_no_other_api(world: World) -> None:
    """What a service presents to the key service is good there only: every other API
    answers 401 to it, on every route it guards that takes no path parameter."""
    credential = bearer(demo_key_service_credential("gateway"))
    answers: dict[str, list[int]] = {}
    async with httpx.AsyncClient(timeout=30.0) as http:
        for name in set(API_SERVICES) - {"key_service"}:
            url, _ = api_of(world, name)
            document = (await http.get(f"{url}/openapi.json")).json()
            for path, operations in document["paths"].items():
                guarded = operations.get("get", {}).get("security")
                if guarded and "{" not in path:
                    answer = await http.get(url + path, headers=credential)
                    answers.setdefault(name, []).append(answer.status_code)
    assert set(answers) == set(API_SERVICES) - {"key_service"}, answers
    assert {name: set(codes) for name, codes in answers.items()} == {name: {401} for name in answers}


async def test_hostile_parameters_and_headers_are_4xx_problems_naming_them_on_every_api(world: World) -> None:
    """A NUL, an over-long value and a date-time UTC cannot hold, in every query and path
    parameter every API documents; header lines HTTP does not allow. Before, several ended
    in 500 (dead letters, audit projector, notifier, rollouts) or 503 (the gateway, whose
    read model answered 500)."""
    wrong: list[str] = []
    probed: dict[str, int] = {}
    async with httpx.AsyncClient(timeout=30.0, verify=trust()) as http:
        for name in API_SERVICES:
            url, key = api_of(world, name)
            document = (await http.get(f"{url}/openapi.json")).json()
            for probe in probes(document):
                try:
                    answer = await http.request(
                        probe.method, url + probe.path, params=probe.query, headers=bearer(key)
                    )
                except httpx.HTTPError as exc:  # a dropped connection is an answer too, a wrong one
                    wrong.append(f"{name}: {probe} -> {exc!r}")
                    continue
                is_problem = answer.headers.get("content-type", "").startswith("application/problem+json")
                problem = answer.json() if is_problem else {}
                if answer.status_code not in (400, 422) or not names(problem, probe.parameter):
                    wrong.append(f"{name}: {probe} -> {answer.status_code} {answer.text[:200]}")
                probed[name] = probed.get(name, 0) + 1
            for line in BAD_HEADER_LINES:
                status, problem = await raw_head(f"{url}/openapi.json", line)
                if status != 400 or problem.get("header") != line.split(b":")[0].decode():
                    wrong.append(f"{name}: header line {line!r} -> {status} {problem}")
    assert wrong == [], "\n".join(wrong)
    # Every API with string parameters was probed (the approval gate's only one is a number).
    assert set(probed) == set(API_SERVICES) - {"approval_gate"}, probed


@pytest.mark.parametrize("name", API_SERVICES)
async def test_schemathesis_with_nul_strings_finds_no_server_error_on_any_api(
    world: World, name: str, tmp_path: Path
) -> None:
    """Strings may hold NUL (refused by rule, so the "valid input accepted" check is left
    out); every other check holds."""
    url, key = api_of(world, name)
    summary = await schemathesis(
        url,
        key,
        tmp_path / "schemathesis.txt",
        # The boundary values of the coverage phase, and a little fuzzing: the gateway's own
        # run (tests/services/gateway) goes deeper, without NUL.
        "--phases",
        "coverage,fuzzing",
        "--generation-allow-x00",
        "true",
        "--exclude-checks",
        "positive_data_acceptance",
        examples=6,
    )
    print(summary)


# -- any script, any input -----------------------------------------------------------------

NON_ASCII_LINES = {
    "german": "Rechenzeit für Müller & Söhne, Straße 5",
    "japanese": "東京リージョンのＧＰＵ時間",
    "emoji": "GPU hours 🚀🧾 for the 👩‍💻 team",
    "rtl": "שעות מחשוב — ساعات الحوسبة",
}


@pytest.mark.parametrize("script", sorted(NON_ASCII_LINES))
async def test_a_procurement_in_any_script_is_approved_and_paid(world: World, script: str) -> None:
    run = uuid.uuid4().hex[:8]
    line = NON_ASCII_LINES[script]
    workflow_id = (await world.submit("procurement", invoice(run, item=line))).json()["workflow_id"]
    status = await world.waiting_on(workflow_id, "manager")
    approval = status["pending_approval"]
    comment = f"Freigegeben ✅ 承認 {script}"
    assert (await world.decide(approval["approval_id"], MANAGER, "approve", comment)).status_code == 202
    final = await world.ended(workflow_id)
    assert final["status"] == "completed"
    validated = await read_topic(
        world.kafka,
        [world.registry.physical_topic("invoice.validated")],
        until=lambda rs: any(e["workflow_id"] == workflow_id for e in events_of(rs, "invoice.validated")),
    )
    [event] = [e for e in events_of(validated, "invoice.validated") if e["workflow_id"] == workflow_id]
    assert [item["description"] for item in event["payload"]["extracted"]["lines"]] == [line]
    decided = await read_topic(
        world.kafka,
        [world.registry.physical_topic("approval.decided")],
        until=lambda rs: any(e["workflow_id"] == workflow_id for e in events_of(rs, "approval.decided")),
    )
    [decision] = [e for e in events_of(decided, "approval.decided") if e["workflow_id"] == workflow_id]
    assert opened(decision["payload"]["comment"], world.key_service) == comment  # sealed on the topic


async def test_a_report_on_a_non_ascii_topic_is_gathered_approved_and_delivered(world: World) -> None:
    topic = f"量子計算の現状 — Überblick 🚀 שלום {uuid.uuid4().hex[:6]}"
    sandbox = world.stack.sandbox_url
    body = {
        "input": {
            "topic": topic,
            "sources": [{"name": n, "url": f"{sandbox}/sources/{n}"} for n in ("alpha", "gamma")],
            "delivery_url": f"{sandbox}/deliveries",
        },
    }
    workflow_id = (await world.submit("research_report", body)).json()["workflow_id"]
    status = await world.waiting_on(workflow_id, "editor")
    calls = (await world.stats())["source_calls_by_topic"]
    assert calls[f"{topic}/alpha"] == calls[f"{topic}/gamma"] == 1  # the topic arrived intact
    await world.decide(status["pending_approval"]["approval_id"], EDITOR, "approve", "承認します 👍")
    final = await world.ended(workflow_id)
    assert final["status"] == "completed"
    assert final["workflow_id"] == workflow_id


# -- live fuzz --------------------------------------------------------------------------------

FUZZ_RECORDS = 200
FUZZ_WORKFLOWS = 10


async def test_hostile_records_interleaved_with_workflows_are_dead_letters_and_every_workflow_ends(
    world: World,
) -> None:
    """Hostile records on the same partitions as live workflows: every workflow ends, every
    hostile record becomes a dead letter with its original bytes, in every consumer."""
    topic = world.registry.physical_topic("invoice.received")
    valid = [e.body for e in world.registry.examples[("invoice.received", 1)]]
    valid += [e.body for e in world.registry.examples[("invoice.validated", 1)]]
    hostile = [raw for raw in corpus(valid, FUZZ_RECORDS * 3, seed=13) if _undecodable(raw, world.registry)]
    hostile = list(dict.fromkeys(hostile))[:FUZZ_RECORDS]
    assert len(hostile) == FUZZ_RECORDS
    started = time.monotonic()
    workflows = []
    batch = FUZZ_RECORDS // FUZZ_WORKFLOWS
    for n in range(FUZZ_WORKFLOWS):
        await publish(world.kafka, topic, hostile[n * batch : (n + 1) * batch], key=f"fuzz-{n}".encode())
        run = uuid.uuid4().hex[:8]
        # Rejected at validation (totals differ): a whole workflow with no person in it.
        response = await world.submit(
            "procurement", invoice(run, total="99.00", item=SCRIPTS[n % len(SCRIPTS)])
        )
        assert response.status_code == 202, response.text
        workflows.append(response.json()["workflow_id"])
    await publish(world.kafka, topic, hostile[FUZZ_WORKFLOWS * batch :], key=b"fuzz-last")
    for workflow_id in workflows:
        assert (await world.ended(workflow_id))["status"] == "rejected"
    consumers = {"invoice_agent", "budget_agent", "payment_agent", "audit_projector"}
    originals: dict[str, Any] = {}
    keys: dict[str, bytes] = {}

    def covered(records: list[Any]) -> bool:
        return all(
            set(hostile) <= seen
            for seen in _dead_lettered(records, topic, consumers, world.key_service, originals, keys).values()
        )

    records = await read_topic(
        world.kafka, [world.registry.physical_topic("event.dead_lettered")], until=covered, timeout_s=120
    )
    print(
        f"live fuzz: {len(hostile)} hostile records x {len(consumers)} consumers dead-lettered, "
        f"{len(workflows)} workflows ended, in {time.monotonic() - started:.1f}s"
    )
    assert set(_dead_lettered(records, topic, consumers, world.key_service, originals)) == consumers


def _undecodable(raw: bytes, registry: Registry) -> bool:
    try:
        decode(raw, registry)
    except DecodeError:
        return True
    return False


def _dead_lettered(
    records: list[Any],
    topic: str,
    consumers: set[str],
    key_service: str,
    originals: dict[str, Any] | None = None,
    keys: dict[str, bytes] | None = None,
) -> dict[str, set[bytes]]:
    """The original bytes each consumer dead-lettered from ``topic``. ``originals`` keeps
    what was opened (by letter) and ``keys`` the data keys fetched, so a caller that asks
    again as records arrive opens each letter once and asks the key service once per key."""
    seen: dict[str, set[bytes]] = {name: set() for name in consumers}
    originals = {} if originals is None else originals
    for letter in events_of(records, "event.dead_lettered"):
        payload = letter["payload"]
        if payload["service"] not in seen:
            continue
        if letter["event_id"] not in originals:
            originals[letter["event_id"]] = opened(payload["original"], key_service, keys)
        original = originals[letter["event_id"]]
        if original["topic"] == topic:
            seen[payload["service"]].add(base64.b64decode(original["value_b64"]))
    return seen


async def test_a_retired_workflow_takes_the_gateways_rows_with_it(
    world: World, world_pg: asyncpg.Connection
) -> None:
    """Retention reaches the gateway's own tables: its submission, reviewers' decisions and
    cancel request go when the workflow is retired (as the projector's janitor asks)."""
    run = uuid.uuid4().hex[:8]
    workflow_id = (await world.submit("procurement", invoice(run))).json()["workflow_id"]
    await world.waiting_on(workflow_id, "manager")
    reason = {"reason": "retention test"}
    assert (
        await world.http.post(f"/v1/workflows/{workflow_id}/cancel", json=reason, headers=SUBMITTER)
    ).is_success
    assert (await world.ended(workflow_id))["status"] == "cancelled"

    async def kept() -> int:
        return int(
            await world_pg.fetchval(
                """SELECT (SELECT count(*) FROM gateway.submissions WHERE workflow_id = $1)
                        + (SELECT count(*) FROM gateway.cancellations WHERE workflow_id = $1)""",
                workflow_id,
            )
        )

    assert await kept() == 2
    run_id = str(uuid.uuid4())
    retired = stated_by(
        envelope_of(WorkflowsRetired(run_id=run_id, batch=1, mode="purge", workflow_ids=[workflow_id])),
        "audit_projector",
    )
    await publish(world.kafka, world.registry.physical_topic("workflows.retired"), [retired])
    await wait_until(lambda: _none_kept(kept()), what="the gateway's rows of the workflow removed")
    records = await read_topic(
        world.kafka,
        [world.registry.physical_topic("data.removed")],
        until=lambda rs: any(
            e["payload"]["request_id"] == f"{run_id}/1" and e["payload"]["service"] == "gateway"
            for e in events_of(rs, "data.removed")
        ),
    )
    [gateway] = [
        e["payload"]
        for e in events_of(records, "data.removed")
        if e["payload"]["request_id"] == f"{run_id}/1" and e["payload"]["service"] == "gateway"
    ]
    assert gateway["rows"]["gateway.submissions"] == 1 and gateway["rows"]["gateway.cancellations"] == 1


async def _none_kept(count: Any) -> bool:
    return bool(await count == 0)


def marker_forms(marker: str) -> set[bytes]:
    """``marker`` in every encoding a copy could hold it in: UTF-8, JSON-escaped, URL-encoded,
    hex (a bytea column in a dump), and base64 / base64url at each of the three alignments
    (the characters that depend on the marker's bytes alone)."""
    forms: set[bytes] = set()
    for raw in {marker.encode(), json.dumps(marker)[1:-1].encode(), quote(marker).encode()}:
        forms |= {raw, raw.hex().encode()}
        for shift in range(3):
            encoded = base64.b64encode(b"\0" * shift + raw)
            inner = encoded[-(-4 * shift // 3) : (8 * (shift + len(raw))) // 6]
            forms |= {inner, inner.replace(b"+", b"-").replace(b"/", b"_")}
    return forms


def holding(blobs: dict[str, bytes], forms: set[bytes]) -> dict[str, list[str]]:
    """Which blobs hold which forms, with a little context, for the failure message."""
    found: dict[str, list[str]] = {}
    for name, blob in blobs.items():
        for form in forms:
            at = blob.find(form)
            if at >= 0:
                found.setdefault(name, []).append(repr(blob[max(0, at - 60) : at + len(form) + 60]))
    return found


async def test_an_erased_subject_is_in_no_topic_table_or_log_and_its_running_workflow_ends_erased(
    world: World, world_pg: asyncpg.Connection
) -> None:
    run = uuid.uuid4().hex[:8]
    marker = f"Zoë Erasable-{run}"  # non-ASCII: JSON escapes it, so that form is searched too
    subject = f"subject:erasable-{run}"  # kept only keyed (HMAC): never in clear either

    def theirs(tag: str, **extra: Any) -> dict[str, Any]:
        body = invoice(f"{run}{tag}")
        body["input"]["document_text"] += f"\nBill to: {marker}"
        return {**body, "subject_ref": subject, **extra}

    # One completes, approved with a comment naming the subject; its completion webhook keeps
    # failing until the gateway gives up (a dead letter of the subject's workflow). One waits
    # at approval. A third belongs to someone else.
    hook = f"{world.stack.sandbox_url}/hooks/erase-{run}?status=503"
    done = (await world.submit("procurement", theirs("a", callback_url=hook))).json()["workflow_id"]
    waiting = (await world.submit("procurement", theirs("b"))).json()["workflow_id"]
    other = (await world.submit("procurement", invoice(f"{run}c"))).json()["workflow_id"]
    for workflow_id in (done, waiting, other):
        await world.waiting_on(workflow_id, "manager")
    approval = (await world.status(done))["pending_approval"]["approval_id"]
    assert (await world.decide(approval, MANAGER, "approve", f"fine, {marker} may buy")).status_code == 202
    assert (await world.ended(done))["status"] == "completed"
    # Sealed on the way, and opened for whoever may read it (the read is in the access log).
    assert marker in json.dumps((await world.status(done))["timeline"], ensure_ascii=False)

    async def dead_lettered() -> bool:
        world.advance(120)  # the gateway's backoff (at most ~17 minutes in all) in simulated time
        found = await world_pg.fetchval(
            "SELECT count(*) FROM deadletter_service.letters WHERE original_workflow_id = $1", done
        )
        return bool(found)

    await wait_until(dead_lettered, timeout_s=120, interval_s=1.0, what="the webhook's dead letter")
    assert (await world.status(waiting))["status"] == "waiting"  # the clock moved, not the window

    projector = (world.stack.procs["audit_projector"].health_url or "").removesuffix("/health")
    code, out, err = await chorus("erase", "--subject", subject, "--yes", "--wait", "120", "--api", projector)
    assert code == 0, out + err
    for service in ("key_service", "gateway", "deadletter_service", "timer_service", "budget_agent"):
        assert service in out, out

    # The workflow still waiting was ended, its compensation ran; someone else's goes on. Its
    # submitter no longer shows as its owner (that link was personal data): operators see it.
    assert (await world.ended(waiting, OPERATOR))["status"] == "erased"
    released = await wait_until(
        lambda: world_pg.fetchval(
            "SELECT status = 'released' FROM budget_agent.reservations WHERE workflow_id = $1", waiting
        ),
        what="the erased workflow's budget released",
    )
    assert released
    late = await world.decide(
        (await world.status(other))["pending_approval"]["approval_id"], MANAGER, "approve"
    )
    assert late.status_code == 202
    assert (await world.ended(other))["status"] == "completed"
    assert "INVOICE INV-" in json.dumps((await world.status(other))["timeline"])

    # No copy anywhere: every topic from offset 0, every schema, every service's log.
    forms = marker_forms(marker) | marker_forms(subject)
    # The search finds the marker however a copy would hold it (a record's bytes in base64
    # inside JSON, a bytea column in hex), so an empty result below means absent.
    probes = {
        "json": json.dumps({"text": f"Bill to: {marker}"}).encode(),
        "base64": json.dumps({"v": base64.b64encode(f"{{'d': 'x{marker}'}}".encode()).decode()}).encode(),
        "hex": b"\\x" + f"..{marker}..".encode().hex().encode(),
    }
    assert set(holding(probes, forms)) == set(probes)
    topics = await dump_topics(world.kafka)
    assert holding({f"record {i}": b for i, b in enumerate(topics)}, forms) == {}
    dumped = await asyncio.create_subprocess_exec(
        "pg_dump", "--data-only", "--dbname", world.database_url, stdout=asyncio.subprocess.PIPE
    )
    dump, _ = await asyncio.wait_for(dumped.communicate(), timeout=120)
    assert dumped.returncode == 0
    assert len(dump) > 10_000  # the services' tables are in it
    assert holding({"pg_dump": dump}, forms) == {}
    logs = {p.name: p.read_bytes() for p in world.stack.workdir.glob("*.log") if p.name != "sandbox.log"}
    assert "gateway.log" in logs and "key_service.log" in logs
    assert holding(logs, forms) == {}
    # The audit trail still replays: the projection rebuilt from the topics equals the live one.
    code, out, err = await chorus("replay", "--verify", "--drop", "--api", projector)
    assert code == 0, out + err


async def test_the_workflow_list_filters_searches_and_pages_without_repeats(world: World) -> None:
    """GET /v1/workflows: filters combine, search finds a business key, keyset pages
    visit every match exactly once, and each caller lists only what it may."""
    run = uuid.uuid4().hex[:8]
    keys = [f"order-{run}-{i}" for i in range(3)]
    ids = [
        (await world.submit("procurement", invoice(f"{run}{i}"), key=key)).json()["workflow_id"]
        for i, key in enumerate(keys)
    ]
    rejected = (await world.submit("procurement", invoice(run, po="PO-0000"))).json()["workflow_id"]
    for workflow_id in ids:
        await world.waiting_on(workflow_id, "manager")
    assert (await world.ended(rejected))["status"] == "rejected"
    since = (await world.status(ids[0]))["started_at"]

    async def listed(who: dict[str, str] = OPERATOR, **params: Any) -> httpx.Response:
        return await world.http.get("/v1/workflows", params=params, headers=who)

    found = await listed(q=keys[1])
    assert found.status_code == 200, found.text
    [one] = found.json()["workflows"]
    assert one["workflow_id"] == ids[1] and one["business_key"] == keys[1]
    assert one["status"] == "waiting" and one["pending_tier"] == "manager"
    assert [w["workflow_id"] for w in (await listed(q=rejected)).json()["workflows"]] == [rejected]

    # Every waiting procurement started since the first of ours, a page of one at a time.
    seen: list[str] = []
    params: dict[str, Any] = {
        "workflow_type": "procurement",
        "status": "waiting",
        "started_after": since,
        "limit": 1,
    }
    while True:
        page = (await listed(**params)).json()
        seen += [w["workflow_id"] for w in page["workflows"]]
        if not page["next_cursor"]:
            break
        assert page["next"] and "cursor=" in page["next"]
        params["cursor"] = page["next_cursor"]
    assert len(seen) == len(set(seen))  # no repeats
    assert set(ids) <= set(seen) and rejected not in seen
    # Newest first: ours were submitted in order.
    assert [s for s in seen if s in ids] == ids[::-1]
    ended = (await listed(status=["rejected", "completed"], started_after=since)).json()["workflows"]
    assert rejected in {w["workflow_id"] for w in ended} and not set(ids) & {w["workflow_id"] for w in ended}

    # A submitter lists its own; another's are invisible; a reviewer is told where to look.
    mine = (await listed(SUBMITTER, started_after=since)).json()["workflows"]
    assert set(ids) <= {w["workflow_id"] for w in mine}
    assert (await listed(OTHER_SUBMITTER, started_after=since)).json()["workflows"] == []
    spying = await listed(OTHER_SUBMITTER, submitted_by="demo-submitter")
    assert spying.status_code == 403
    by_name = (await listed(submitted_by="demo-submitter", q=keys[0])).json()["workflows"]
    assert [w["workflow_id"] for w in by_name] == [ids[0]]
    assert (await listed(submitted_by="olga.other", q=keys[0])).json()["workflows"] == []
    reviewer = await listed(MANAGER)
    assert reviewer.status_code == 403 and "/v1/approvals" in reviewer.json()["detail"]

    garbled = await listed(cursor="not-a-cursor")
    assert garbled.status_code == 422 and garbled.json()["errors"][0]["pointer"] == "query:cursor"
    wrong = await listed(status="sleeping")
    assert wrong.status_code == 422 and "status" in wrong.json()["detail"]


async def test_a_search_by_business_attributes_finds_exactly_the_matching_workflows(world: World) -> None:
    """GET /v1/workflows?query= over the declared search attributes (workflows.yaml): two
    attributes and a status combine, OR and NOT do what they say, the CLI finds the same,
    and a query that cannot run is a 400 naming what is wrong, never SQL."""
    run = uuid.uuid4().hex[:8]
    po = f"PO-{run}"  # on no record: each ends rejected, its attributes stated all the same
    made = {
        (vendor, total): (
            await world.submit(
                "procurement",
                # one line of the whole total: it reads as claimed, and the PO on no record rejects it
                procurement(
                    f"{run}{i}", vendor=vendor, po=po, total=total, line=f"1 x GPU hours @ {total} EUR"
                ),
            )
        ).json()["workflow_id"]
        for i, (vendor, total) in enumerate(
            [
                ("vendor-acme", "500.00"),
                ("vendor-acme", "20000.00"),
                ("vendor-closed", "500.00"),
                ("vendor-closed", "20000.00"),
            ]
        )
    }
    for workflow_id in made.values():
        assert (await world.ended(workflow_id))["status"] == "rejected"

    async def found(query: str) -> set[str]:
        answer = await world.http.get("/v1/workflows", params={"query": query}, headers=OPERATOR)
        assert answer.status_code == 200, answer.text
        return {w["workflow_id"] for w in answer.json()["workflows"]}

    mine = f"po_number = '{po}'"
    assert await found(f"{mine} AND vendor = 'vendor-acme' AND amount > 100000") == {
        made[("vendor-acme", "20000.00")]
    }
    assert await found(
        f"{mine} AND (vendor = 'vendor-closed' OR amount <= 50000) AND status = 'rejected'"
    ) == {made[key] for key in made if key != ("vendor-acme", "20000.00")}
    assert await found(f"{mine} AND NOT vendor IN ('vendor-acme') AND amount != 50000") == {
        made[("vendor-closed", "20000.00")]
    }
    assert await found(f"{mine} AND status = 'waiting'") == set()
    answer = await world.http.get("/v1/workflows", params={"query": mine}, headers=OPERATOR)
    row = next(w for w in answer.json()["workflows"] if w["workflow_id"] == made[("vendor-acme", "500.00")])
    assert row["attributes"] == {"amount": 50000, "currency": "EUR", "po_number": po, "vendor": "vendor-acme"}

    # The same from the command line; and what it may search by.
    code, out, err = await chorus_cli(
        world, "workflows", "list", "--query", f"{mine} AND vendor = 'vendor-closed'", "--output", "json"
    )
    assert code == 0, err
    assert {w["workflow_id"] for w in json.loads(out)["workflows"]} == {
        made[("vendor-closed", "500.00")],
        made[("vendor-closed", "20000.00")],
    }
    code, out, err = await chorus_cli(world, "workflows", "attributes", "--output", "json")
    assert code == 0, err
    assert json.loads(out)["workflow_types"]["procurement"]["amount"] == "number"

    # What cannot run says why; nothing of it reaches the database as SQL.
    for query, says in (
        (f"{mine} AND amount > 'lots'", "amount is a number"),
        ("vendor = 'x' OR 1=1; DROP TABLE workflow_status", "at column 17"),
        ("colour = 'red'", "unknown attribute 'colour'"),
    ):
        refused = await world.http.get("/v1/workflows", params={"query": query}, headers=OPERATOR)
        assert refused.status_code == 400, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert says in refused.json()["detail"], refused.json()
    # A submitter's search stays within their own workflows.
    theirs = await world.http.get("/v1/workflows", params={"query": mine}, headers=OTHER_SUBMITTER)
    assert theirs.status_code == 200 and theirs.json()["workflows"] == []


def short_of_a_line(run: str) -> dict[str, Any]:
    """An invoice of 1,240 EUR whose document shows 30 of its 40 GPU hours: the reading's
    lines fall 310 EUR short of its total, and the invoice agent waits for the missing line."""
    return procurement(run, line="30 x GPU hours @ 31.00 EUR")


async def waiting_for_a_line(world: World, run: str) -> str:
    workflow_id: str = (await world.submit("procurement", short_of_a_line(run))).json()["workflow_id"]
    status = await world.wait(
        workflow_id, lambda s: s.get("waiting_for") == "signal add_line", "wait for the missing line"
    )
    assert status["status"] == "waiting" and status["stage"] == "invoice.correction_requested"
    return workflow_id


MISSING_LINE = {"line": {"description": "GPU hours", "quantity": 10, "unit_price_cents": 3100}}


async def test_a_signal_adds_the_missing_line_and_the_procurement_goes_on_to_payment(world: World) -> None:
    workflow_id = await waiting_for_a_line(world, uuid.uuid4().hex[:8])
    offered = await world.http.get(f"/v1/workflows/{workflow_id}/signals", headers=SUBMITTER)
    assert [s["name"] for s in offered.json()["signals"]] == ["add_line"]
    # An auditor reads every workflow and sends nothing.
    assert (await world.http.get(f"/v1/workflows/{workflow_id}/signals", headers=AUDITOR)).json()[
        "signals"
    ] == []

    path = f"/v1/workflows/{workflow_id}/signals/add_line"
    body = {"input": MISSING_LINE, "reason": "the scan cut the last line off"}
    assert (await world.http.post(path, json=body, headers=AUDITOR)).status_code == 403
    assert (await world.http.post(path, json=body, headers=OTHER_SUBMITTER)).status_code == 404
    bad = {**body, "input": {"line": {**MISSING_LINE["line"], "quantity": 0}}}
    refused = await world.http.post(path, json=bad, headers=SUBMITTER)
    assert refused.status_code == 422 and refused.json()["errors"][0]["pointer"] == "/input/line/quantity"
    unknown = await world.http.post(
        f"/v1/workflows/{workflow_id}/signals/add_lines", json=body, headers=SUBMITTER
    )
    assert unknown.status_code == 404 and "add_line" in unknown.json()["detail"]

    keyed = {**SUBMITTER, "Idempotency-Key": f"line-{workflow_id}"}
    sent = await world.http.post(path, json=body, headers=keyed)
    assert sent.status_code == 202, sent.text
    assert sent.json()["status"] == "sent" and sent.headers["location"] == sent.json()["status_url"]
    again = await world.http.post(path, json=body, headers=keyed)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["signal_id"] == sent.json()["signal_id"]

    # The line completes the invoice: validated, reserved, approved, paid.
    status = await world.waiting_on(workflow_id, "manager")
    assert (
        await world.decide(status["pending_approval"]["approval_id"], MANAGER, "approve")
    ).status_code == 202
    final = await world.ended(workflow_id)
    assert final["status"] == "completed" and final["result"]["amount_cents"] == 124_000
    types = [entry["event_type"] for entry in final["timeline"]]
    assert types.count("invoice.line_added") == 1  # the retry sent nothing more
    at = types.index("invoice.line_added")
    assert types[at - 1 : at + 3] == [
        "invoice.correction_requested",
        "invoice.line_added",
        "invoice.line_checked",
        "invoice.validated",
    ]
    added = final["timeline"][at]
    assert added["producer"] == "gateway"
    assert (added["payload"]["sent_by"], added["payload"]["reason"]) == ("demo-submitter", body["reason"])
    answered = (await world.http.get(sent.json()["status_url"], headers=SUBMITTER)).json()
    assert answered["status"] == "answered" and answered["answer"]["accepted"] is True
    late = await world.http.post(path, json=body, headers=SUBMITTER)
    assert late.status_code == 409 and "completed" in late.json()["detail"]


async def test_a_line_the_gateway_did_not_send_validates_nothing(world: World) -> None:
    """The budget agent writes procurement.events and holds a key of its own; whoever holds
    it states a submitter's missing line, signed as the budget agent, and again claiming to
    be the gateway without its signature. The invoice agent and the audit projection refuse
    both: only the gateway, which checked who sent it, states a signal."""
    workflow_id = await waiting_for_a_line(world, uuid.uuid4().hex[:8])
    line = InvoiceLineAdded(
        signal_id=f"sig-{uuid.uuid4().hex}",
        sent_by="demo-submitter",
        reason="forged",
        line=InvoiceLine(description="GPU hours", quantity=10, unit_price_cents=3100),
    )
    topic = world.registry.physical_topic("invoice.line_added")
    as_budget = stated_by(
        envelope_of(line, workflow_id=workflow_id, workflow_type="procurement"), "budget_agent"
    )
    await publish(world.kafka, topic, [as_budget])  # signed with the budget agent's own key
    as_gateway = stated_by(envelope_of(line, workflow_id=workflow_id, workflow_type="procurement"), "gateway")
    await publish(world.kafka, topic, [as_gateway], sign=False)
    for service in ("invoice_agent", "audit_projector"):
        await refused_by(world, service, {str(as_budget.event_id), str(as_gateway.event_id)})
    status = await world.status(workflow_id)
    assert status["waiting_for"] == "signal add_line"
    assert "invoice.line_added" not in [e["event_type"] for e in status["timeline"]]
    cancel = {"reason": "test over"}
    assert (
        await world.http.post(f"/v1/workflows/{workflow_id}/cancel", json=cancel, headers=SUBMITTER)
    ).status_code == 202


async def test_an_update_answers_with_the_invoice_agents_verdict_and_a_refused_line_changes_nothing(
    world: World,
) -> None:
    workflow_id = await waiting_for_a_line(world, uuid.uuid4().hex[:8])
    submitter = {"CHORUS_GATEWAY_URL": world.stack.api_url, "CHORUS_API_KEY": "demo-submitter-key"}
    too_little = {"line": {**MISSING_LINE["line"], "quantity": 5}}
    update = ("workflows", "update", workflow_id, "add_line", "--reason", "one line was missing")
    code, out, err = await chorus(*update, "--input", json.dumps(too_little), env=submitter)
    assert code == 1, err
    assert "refused: with it the lines add up to 108500, the total says 124000: not taken" in out
    assert (await world.status(workflow_id))["waiting_for"] == "signal add_line"  # nothing changed

    path = f"/v1/workflows/{workflow_id}/updates/add_line"
    answered = await world.http.post(
        path, json={"input": MISSING_LINE, "reason": "this one"}, headers=SUBMITTER
    )
    assert answered.status_code == 200, answered.text
    answer = answered.json()["answer"]
    assert answer["accepted"] is True and answer["detail"] == "the lines add up now: invoice validated"
    assert answer["event_type"] == "invoice.line_checked" and answer["payload"]["lines_cents"] == 124_000
    await world.waiting_on(workflow_id, "manager")

    code, out, err = await chorus(
        *update, "--input", json.dumps(MISSING_LINE), "--output", "json", env=submitter
    )
    assert code == 1, err
    assert json.loads(out)["answer"]["detail"] == "the invoice was validated already"
    cancel = {"reason": "test over"}
    assert (
        await world.http.post(f"/v1/workflows/{workflow_id}/cancel", json=cancel, headers=SUBMITTER)
    ).status_code == 202


async def test_a_bulk_signal_adds_the_missing_line_to_each_invoice_a_query_finds_once(world: World) -> None:
    """Five invoices of one amount (unique to this run) whose documents lack the same line:
    an operator adds it to every one the search finds waiting for it; each is validated and
    goes on to its manager, with one line_added in its timeline naming the operator."""
    run = uuid.uuid4().hex[:8]
    short = f"{50 + int(run[:4], 16) % 9000 / 100:.2f}"  # this run's own amount, on one line
    total = f"{float(short) + 31:.2f}"
    bodies = [procurement(f"{run}{i}", total=total, line=f"1 x GPU hours @ {short} EUR") for i in range(5)]
    ids = [(await world.submit("procurement", body)).json()["workflow_id"] for body in bodies]
    query = f"amount = {round(float(total) * 100)} AND stage = 'invoice.correction_requested'"
    for workflow_id in ids:
        await world.wait(
            workflow_id, lambda s: s.get("waiting_for") == "signal add_line", "the wait for a line"
        )
    line = {"line": {"description": "shipping", "quantity": 1, "unit_price_cents": 3100}}
    ask = {
        "action": "signal",
        "signal": "add_line",
        "input": line,
        "query": query,
        "reason": "scanner dropped it",
    }
    bad = await world.http.post(
        "/v1/bulk-actions", json={**ask, "input": {"line": {"quantity": 1}}}, headers=OPERATOR
    )
    assert bad.status_code == 422 and bad.json()["errors"][0]["pointer"] == "/input/line/description"
    created = await world.http.post("/v1/bulk-actions", json=ask, headers=OPERATOR)
    assert created.status_code == 202, created.text
    assert (created.json()["matched"], created.json()["signal"]) == (5, "add_line")

    async def progress() -> dict[str, Any]:
        body: dict[str, Any] = (await world.http.get(created.headers["Location"], headers=OPERATOR)).json()
        return body

    final = await wait_until(
        progress, until=lambda p: p["finished_at"] is not None, timeout_s=60, what="the end"
    )
    assert (final["done"], final["skipped"]) == (5, 0), final
    assert all(item["detail"].startswith("sig-") for item in final["items"])
    for workflow_id in ids:
        status = await world.waiting_on(workflow_id, "manager")
        added = [e for e in status["timeline"] if e["event_type"] == "invoice.line_added"]
        assert len(added) == 1 and added[0]["payload"]["sent_by"] == "sam.operator", added
        cancel = {"reason": "test over"}
        assert (
            await world.http.post(f"/v1/workflows/{workflow_id}/cancel", json=cancel, headers=SUBMITTER)
        ).status_code == 202


async def schedule_of(world: World, schedule_id: str) -> dict[str, Any]:
    answer = await world.http.get(f"/v1/schedules/{schedule_id}", headers=SUBMITTER)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def runs_until(world: World, schedule_id: str, count: int, what: str) -> list[dict[str, Any]]:
    """The schedule's runs (oldest first) once ``count`` of them were acted on."""
    found = await wait_until(
        lambda: schedule_of(world, schedule_id),
        until=lambda s: sum(r["status"] not in ("due", "buffered") for r in s["runs"]) >= count,
        timeout_s=60,
        interval_s=0.5,
        what=what,
    )
    return list(reversed(found["runs"]))


async def test_a_schedule_starts_workflows_on_the_simulated_clock_and_skips_an_overlap(world: World) -> None:
    """Hourly, overlap skip: the first run's procurement waits for its manager when the
    second falls due, so that one is skipped saying why; paused, nothing falls due; a person
    triggers one, which runs once the first ended."""
    body = {"workflow_type": "procurement", "input": invoice(uuid.uuid4().hex[:8])["input"], "every_s": 3600}
    bad = await world.http.post("/v1/schedules", json={**body, "cron": "0 9 * *"}, headers=SUBMITTER)
    assert bad.status_code == 422 and bad.json()["errors"][0]["pointer"] == "/cron"
    wrong = {**body, "input": {**body["input"], "total_cents": "many"}}
    refused = await world.http.post("/v1/schedules", json=wrong, headers=SUBMITTER)
    assert refused.status_code == 422 and refused.json()["errors"][0]["pointer"] == "/input/total_cents"
    assert (await world.http.post("/v1/schedules", json=body, headers=OPERATOR)).status_code == 403

    created = await world.http.post("/v1/schedules", json=body, headers=SUBMITTER)
    assert created.status_code == 201, created.text
    schedule_id = created.json()["schedule_id"]
    try:
        world.advance(3600 + 5)
        [first] = await runs_until(world, schedule_id, 1, "the first run")
        assert (first["status"], first["kind"]) == ("started", "scheduled"), first
        status = await world.waiting_on(first["workflow_id"], "manager")
        assert status["business_key"] == f"schedule:{schedule_id}:{first['due_at']}"

        world.advance(3600)
        runs = await runs_until(world, schedule_id, 2, "the second run")
        assert (
            runs[1]["status"] == "skipped"
            and runs[1]["detail"] == f"{first['workflow_id']} was still running"
        )

        paused = await world.http.post(f"/v1/schedules/{schedule_id}/pause", headers=OPERATOR)
        assert paused.status_code == 200 and paused.json()["next_due_at"] is None
        world.advance(3600)
        await asyncio.sleep(3)  # the timer armed before the pause fires: it records nothing
        assert len((await schedule_of(world, schedule_id))["runs"]) == 2
        resumed = await world.http.post(f"/v1/schedules/{schedule_id}/resume", headers=SUBMITTER)
        assert resumed.json()["state"] == "active" and resumed.json()["next_due_at"] is not None

        approval_id = status["pending_approval"]["approval_id"]
        assert (await world.decide(approval_id, MANAGER, "approve")).status_code == 202
        assert (await world.ended(first["workflow_id"]))["status"] == "completed"
        triggered = await world.http.post(f"/v1/schedules/{schedule_id}/trigger", headers=SUBMITTER)
        assert triggered.status_code == 200, triggered.text
        runs = await runs_until(world, schedule_id, 3, "the triggered run")
        assert (runs[2]["kind"], runs[2]["status"]) == ("manual", "started"), runs[2]
        changes = [c["action"] for c in (await schedule_of(world, schedule_id))["changes"]]
        assert changes == ["trigger", "resume", "pause", "create"]
        # Each run is its creator's submission: an operator stops runs, never starts one.
        by_operator = await world.http.post(f"/v1/schedules/{schedule_id}/trigger", headers=OPERATOR)
        assert by_operator.status_code == 403 and "only its creator" in by_operator.json()["detail"]
    finally:
        await world.http.delete(f"/v1/schedules/{schedule_id}", headers=OPERATOR)
    # Deleted stays deleted.
    assert (
        await world.http.post(f"/v1/schedules/{schedule_id}/resume", headers=SUBMITTER)
    ).status_code == 409


async def test_a_schedule_catches_up_after_the_timer_service_was_down(world: World) -> None:
    """Hourly, runs may overlap, a two-hour catch-up window: the timer service is down
    for three hours. Back up, it fires the timer that was due: the runs of the last two
    hours start (late), the one before is missed."""
    body = {
        "workflow_type": "research_report",
        "input": research(world, f"catch-up {uuid.uuid4().hex[:6]}", {"alpha": ""})["input"],
        "every_s": 3600,
        "overlap": "allow",
        "catchup_window_s": 7200,
    }
    created = await world.http.post("/v1/schedules", json=body, headers=SUBMITTER)
    assert created.status_code == 201, created.text
    schedule_id = created.json()["schedule_id"]
    try:
        await wait_until(lambda: world_armed(world, schedule_id), timeout_s=30, what="the first timer armed")
        world.stack.kill("timer_service")
        world.advance(3 * 3600 + 300)
        await asyncio.sleep(2)
        assert (await schedule_of(world, schedule_id))["runs"] == []  # nothing fires while it is down
        await world.stack.restart("timer_service")
        runs = await runs_until(world, schedule_id, 3, "the runs caught up")
        assert [(r["kind"], r["status"]) for r in runs] == [
            ("catch_up", "missed"),
            ("catch_up", "started"),
            ("scheduled", "started"),
        ], runs
        for run in runs[1:]:
            await world.wait(run["workflow_id"], lambda s: s.get("status") is not None, "its start")
    finally:
        await world.http.delete(f"/v1/schedules/{schedule_id}", headers=OPERATOR)


async def world_armed(world: World, schedule_id: str) -> bool:
    async with connected(world.database_url) as conn:
        armed = await conn.fetchval(
            "SELECT armed_for FROM gateway.schedules WHERE schedule_id = $1", schedule_id
        )
    return armed is not None


async def test_a_bulk_cancel_by_query_survives_a_sigkill_halfway_and_cancels_each_once(
    world: World, world_pg: asyncpg.Connection
) -> None:
    """50 procurements waiting for a manager, found by their amount (unique to this run):
    a dry run counts them and cancels nothing; the bulk cancel acts on them at 5 a second,
    the gateway is SIGKILLed halfway and restarted, and it carries on. Each ends cancelled,
    asked to stop once; one a person cancelled first is skipped saying so."""
    run = uuid.uuid4().hex[:8]
    total = f"{10 + int(run[:4], 16) % 9000 / 100:.2f}"  # this run's own amount
    bodies = [procurement(f"{run}{i}", total=total, line=f"1 x GPU hours @ {total} EUR") for i in range(50)]
    ids = [(await world.submit("procurement", body)).json()["workflow_id"] for body in bodies]
    query = f"amount = {round(float(total) * 100)} AND po_number = 'PO-7781'"

    async def waiting() -> bool:
        listed = await world.http.get(
            "/v1/workflows",
            params={"query": f"{query} AND status = 'waiting'", "limit": 100},
            headers=OPERATOR,
        )
        return len(listed.json()["workflows"]) == len(ids)

    await wait_until(waiting, timeout_s=180, interval_s=1.0, what="50 procurements waiting for a manager")

    ask = {"action": "cancel", "query": query, "reason": "supplier withdrew", "rate_per_s": 5}
    dry = await world.http.post("/v1/bulk-actions", json={**ask, "dry_run": True}, headers=OPERATOR)
    assert dry.status_code == 200, dry.text
    assert (dry.json()["bulk_id"], dry.json()["matched"]) == (None, 50)
    assert {i["workflow_id"] for i in dry.json()["items"]} == set(ids)
    assert (await world.status(ids[0]))["status"] == "waiting"  # nothing done
    refused = await world.http.post(
        "/v1/bulk-actions", json={**ask, "query": "amount > 'x'"}, headers=OPERATOR
    )
    assert refused.status_code == 400 and "amount is a number" in refused.json()["detail"]
    submitter = await world.http.post("/v1/bulk-actions", json=ask, headers=SUBMITTER)
    assert submitter.status_code == 403  # operators only

    created = await world.http.post(
        "/v1/bulk-actions", json=ask, headers={**OPERATOR, "Idempotency-Key": f"bulk-{run}"}
    )
    assert created.status_code == 202, created.text
    bulk_id, status_url = created.json()["bulk_id"], created.headers["Location"]
    assert created.json()["matched"] == 50
    # A person cancels the last one first: the bulk action will find it asked already.
    mine = await world.http.post(
        f"/v1/workflows/{ids[-1]}/cancel", json={"reason": "mine"}, headers=SUBMITTER
    )
    assert mine.status_code == 202, mine.text

    async def progress() -> dict[str, Any]:
        answer = await world.http.get(status_url, headers=OPERATOR)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    await wait_until(
        progress, until=lambda p: p["done"] >= 15, timeout_s=60, what="a third of them cancelled"
    )
    world.stack.kill("gateway")  # SIGKILL, mid-run
    halfway = await world_pg.fetchval(
        "SELECT count(*) FROM gateway.bulk_items WHERE bulk_id = $1 AND status IN ('done', 'skipped')",
        bulk_id,
    )
    assert 15 <= halfway < 50, halfway
    await world.stack.restart("gateway")
    again = await world.http.post(
        "/v1/bulk-actions", json=ask, headers={**OPERATOR, "Idempotency-Key": f"bulk-{run}"}
    )
    assert again.json()["bulk_id"] == bulk_id and again.headers.get("Idempotent-Replayed") == "true"
    final = await wait_until(
        progress, until=lambda p: p["finished_at"] is not None, timeout_s=120, what="the end"
    )
    assert (final["done"], final["skipped"], final["pending"]) == (49, 1, 0), final
    [skipped] = [i for i in final["items"] if i["status"] == "skipped"]
    assert skipped["workflow_id"] == ids[-1]

    for workflow_id in ids:
        ended = await world.ended(workflow_id)
        assert ended["status"] == "cancelled", ended
        asked = [e for e in ended["timeline"] if e["event_type"] == "workflow.cancel_requested"]
        assert len(asked) == 1, (workflow_id, asked)  # asked once, SIGKILL or not
    cancels = await world_pg.fetch(
        "SELECT workflow_id, requested_by, reason FROM gateway.cancellations WHERE workflow_id = ANY($1)", ids
    )
    assert len(cancels) == 50
    by_bulk = [c for c in cancels if c["requested_by"] == "sam.operator"]
    assert len(by_bulk) == 49 and all(bulk_id in c["reason"] for c in by_bulk)

    code, out, err = await chorus_cli(world, "workflows", "bulk-status", bulk_id)
    assert code == 0 and "49 done, 1 skipped, 0 pending of 50" in out, err


async def test_operators_and_reviewers_work_from_the_cli(world: World) -> None:
    """chorus workflows start|list|show and chorus approvals list|decide, table and json."""
    run = uuid.uuid4().hex[:8]
    key = f"cli-{run}"
    body = invoice(run)
    submitter = {"CHORUS_GATEWAY_URL": world.stack.api_url, "CHORUS_API_KEY": "demo-submitter-key"}
    start = (
        "workflows",
        "start",
        "procurement",
        "--subject-ref",
        body["subject_ref"],
        "--idempotency-key",
        key,
    )
    code, out, err = await chorus(
        *start, "--data", json.dumps(body["input"]), "--output", "json", env=submitter
    )
    assert code == 0, err
    workflow_id = json.loads(out)["workflow_id"]
    # Asked again with the same key: the same workflow, not a second one.
    code, out, err = await chorus(*start, "--data", json.dumps(body["input"]), env=submitter)
    assert (code, out.split(":")[0]) == (0, workflow_id), err
    # The services act on the start the gateway signed for it: it reaches its manager.
    await world.waiting_on(workflow_id, "manager")
    code, out, err = await chorus(
        *start[:3], "--data", json.dumps({**body["input"], "total_cents": "many"}), env=submitter
    )
    assert code == 2 and "total_cents" in err and out == "", err

    code, out, err = await chorus_cli(world, "workflows", "list", "--search", key, "--output", "json")
    assert code == 0, err
    [row] = json.loads(out)["workflows"]
    assert row["workflow_id"] == workflow_id and row["status"] == "waiting"
    code, out, err = await chorus_cli(world, "workflows", "list", "--search", key)
    assert code == 0, err
    assert workflow_id in out and key in out and "approval by manager" in out

    manager = {"CHORUS_API_KEY": "demo-manager-key"}
    code, out, err = await chorus(
        "approvals", "list", "--output", "json", env={"CHORUS_GATEWAY_URL": world.stack.api_url, **manager}
    )
    assert code == 0, err
    [approval] = [a for a in json.loads(out)["approvals"] if a["workflow_id"] == workflow_id]
    code, out, err = await chorus(
        "approvals", "list", env={"CHORUS_GATEWAY_URL": world.stack.api_url, **manager}
    )
    assert code == 0 and approval["approval_id"] in out and f"INV-{run}" in out
    code, out, err = await chorus(
        "approvals",
        "decide",
        approval["approval_id"],
        "approve",
        "-m",
        "looks right",
        env={"CHORUS_GATEWAY_URL": world.stack.api_url, **manager},
    )
    assert code == 0, err
    assert out.strip() == f"{approval['approval_id']}: approve submitted (workflow {workflow_id})"
    assert (await world.ended(workflow_id))["status"] == "completed"
    again = await chorus(
        "approvals",
        "decide",
        approval["approval_id"],
        "reject",
        env={"CHORUS_GATEWAY_URL": world.stack.api_url, **manager},
    )
    assert again[0] == 1 and "Already decided" in again[2]

    code, out, err = await chorus_cli(world, "workflows", "show", workflow_id)
    assert code == 0, err
    assert "completed" in out and "approval.decided" in out and "dana.manager" in out


async def test_chorus_status_shows_every_service_with_lag_backlog_and_open_dead_letters(world: World) -> None:
    urls = [
        f"{name}={proc.health_url.removesuffix('/health')}"
        for name, proc in world.stack.procs.items()
        if name in SERVICES and proc.health_url
    ]
    args = [arg for url in urls for arg in ("--url", url)]
    code, out, err = await chorus_cli(world, "status", *args, "--output", "json")
    assert code in (0, 1), err  # 1 when a service is degraded by an earlier test's fault
    reports = {r["service"]: r for r in json.loads(out)}
    assert set(reports) == {u.split("=")[0] for u in urls}
    for name, report in reports.items():
        assert report["status"] in ("ok", "degraded"), report
        if name != "outcome_analytics":  # a faust view: no runtime, no outbox
            assert isinstance(report["consumer_lag"], int) and isinstance(report["outbox_backlog"], int)
        assert isinstance(report["dead_letters_open"], int), report
    code, out, err = await chorus_cli(world, "status", *args)
    assert "lag" in out and "outbox" in out and "dead letters" in out
    for name in reports:
        assert name in out


async def test_a_reset_to_a_step_gives_the_reservation_back_runs_the_step_again_and_pays_once(
    world: World, world_pg: asyncpg.Connection
) -> None:
    """Reset from a step: an operator takes a procurement waiting for its manager back to
    invoice.validated. The budget agent gives its reservation back (the compensation, in
    the timeline), every service rolls back, the budget agent handles the event again (a
    new reservation, a new approval request), and once approved the invoice is paid once.
    A reset of the paid workflow past its payment is refused naming it."""
    run = uuid.uuid4().hex[:8]
    workflow_id, _ = await world.awaiting_manager(invoice(run))
    timeline = (await world.status(workflow_id, OPERATOR))["timeline"]
    validated = next(e for e in timeline if e["event_type"] == "invoice.validated")
    first_reserved = next(e for e in timeline if e["event_type"] == "budget.reserved")
    path = f"/v1/workflows/{workflow_id}/reset"
    body = {"event_id": validated["event_id"], "reason": "the purchase order was corrected in the ledger"}
    assert (await world.http.post(path, json=body, headers=SUBMITTER)).status_code == 403
    unknown = await world.http.post(path, json={**body, "event_id": str(uuid.uuid4())}, headers=OPERATOR)
    assert unknown.status_code == 404 and "not in the workflow's timeline" in unknown.json()["detail"]

    keyed = {**OPERATOR, "Idempotency-Key": f"reset-{run}"}
    accepted = await world.http.post(path, json=body, headers=keyed)
    assert accepted.status_code == 202, accepted.text
    reset = accepted.json()
    assert reset["point_event_type"] == "invoice.validated" and reset["compensated"] == ["budget.reserved"]
    assert {"budget.reserved", "approval.requested"} <= set(reset["undone"])
    again = await world.http.post(path, json=body, headers=keyed)  # a retry: the same reset, once
    assert (again.status_code, again.headers["idempotent-replayed"]) == (200, "true")
    assert again.json() == reset

    def budget_answer(status: dict[str, Any]) -> dict[str, Any] | None:
        return next(
            (
                e["payload"]
                for e in status["timeline"]
                if e["event_type"] == "workflow.reset_applied" and e["payload"]["service"] == "budget_agent"
            ),
            None,
        )

    def live(status: dict[str, Any], event_type: str) -> list[dict[str, Any]]:
        return [e for e in status["timeline"] if e["event_type"] == event_type and e["undone_by"] is None]

    status = await world.wait(
        workflow_id,
        lambda s: (
            budget_answer(s) is not None
            and len(live(s, "budget.reserved")) == 1
            and (s.get("pending_approval") or {}).get("tier") == "manager"
        ),
        "the reset applied, the step run again and the manager asked again",
        who=OPERATOR,
    )
    answer = budget_answer(status)
    assert answer is not None and answer["compensated"] == ["budget.released"] and answer["rehandled"]
    released = live(status, "budget.released")
    assert len(released) == 1 and "reset" in released[0]["payload"]["reason"]
    # The first run's steps stay in the timeline, struck out by the reset; the new ones are new events.
    undone = {e["event_id"] for e in status["timeline"] if e["undone_by"] == reset["reset_id"]}
    assert first_reserved["event_id"] in undone
    assert live(status, "budget.reserved")[0]["event_id"] != first_reserved["event_id"]
    assert any(e["event_type"] == "workflow.reset_requested" for e in status["timeline"])

    approval_id = status["pending_approval"]["approval_id"]
    assert (await world.decide(approval_id, MANAGER, "approve")).status_code == 202
    final = await world.ended(workflow_id)
    assert final["status"] == "completed"
    stats = await world.stats()
    paid = [p for p in stats["payments"]["by_key"].values() if p["invoice_id"] == f"INV-{run}"]
    assert len(paid) == 1
    reservations = await world_pg.fetch(
        "SELECT status FROM budget_agent.reservations WHERE workflow_id = $1", workflow_id
    )
    assert [r["status"] for r in reservations] == ["reserved"]  # held once, by the run that paid

    past = await world.http.post(path, json=body, headers=OPERATOR)
    assert past.status_code == 409 and "payment.issued" in past.json()["detail"]
    code, _, err = await chorus_cli(
        world, "workflows", "reset", workflow_id, "--to", validated["event_id"], "--reason", "pay again?"
    )
    assert code == 1 and "payment.issued" in err and "nothing gives it back" in err


async def test_a_bulk_reset_by_query_takes_each_back_gives_each_reservation_back_and_pays_each_once(
    world: World, world_pg: asyncpg.Connection
) -> None:
    """Four procurements waiting for a manager, found by their amount (unique to this run):
    the CLI's dry run counts them and resets nothing; the bulk reset takes each back to its
    invoice.validated, as the operator and saying which bulk action. Each budget reservation
    is given back and taken again, the manager is asked again, and once approved each
    invoice is paid once."""
    run = uuid.uuid4().hex[:8]
    total = f"{10 + int(run[:4], 16) % 9000 / 100:.2f}"  # this run's own amount
    bodies = [procurement(f"{run}{i}", total=total, line=f"1 x GPU hours @ {total} EUR") for i in range(4)]
    ids = [(await world.awaiting_manager(body))[0] for body in bodies]
    query = f"amount = {round(float(total) * 100)} AND status = 'waiting'"
    first = {
        w: next(
            e["event_id"]
            for e in (await world.status(w, OPERATOR))["timeline"]
            if e["event_type"] == "budget.reserved"
        )
        for w in ids
    }

    ask = (
        "workflows",
        "bulk-reset",
        "--query",
        query,
        "--to",
        "invoice.validated",
        "--reason",
        "ledger fixed",
    )
    code, out, err = await chorus_cli(world, *ask, "--dry-run")
    assert code == 0 and "dry run: would reset to invoice.validated 4 workflow(s); nothing done" in out, (
        out,
        err,
    )
    assert all(w in out for w in ids)
    unknown = await world.http.post(
        "/v1/bulk-actions",
        json={"action": "reset", "reset_to": "invoice.nonsense", "query": query, "reason": "x"},
        headers=OPERATOR,
    )
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["pointer"] == "/reset_to", unknown.text
    for wrong, pointer in (
        ({"action": "cancel", "reset_to": "invoice.validated"}, "/reset_to"),  # another action's field
        ({"action": "repin", "to_release": "0.2.0"}, "/service"),  # a repin names its service
        ({"action": "repin", "service": "no_such_service", "to_release": "0.2.0"}, "/service"),
    ):
        refused = await world.http.post(
            "/v1/bulk-actions", json={**wrong, "query": query, "reason": "x"}, headers=OPERATOR
        )
        assert refused.status_code == 422 and refused.json()["errors"][0]["pointer"] == pointer, refused.text
    code, out, err = await chorus_cli(world, *ask, "--rate", "4", "--output", "json")
    assert code == 0, err
    bulk_id = json.loads(out)["bulk_id"]

    async def progress() -> dict[str, Any]:
        return (await world.http.get(f"/v1/bulk-actions/{bulk_id}", headers=OPERATOR)).json()  # type: ignore[no-any-return]

    final = await wait_until(
        progress, until=lambda p: p["finished_at"] is not None, timeout_s=60, what="the end"
    )
    assert (final["action"], final["reset_to"], final["done"], final["skipped"]) == (
        "reset",
        "invoice.validated",
        4,
        0,
    )

    def live(status: dict[str, Any], event_type: str) -> list[dict[str, Any]]:
        return [e for e in status["timeline"] if e["event_type"] == event_type and e["undone_by"] is None]

    for workflow_id in ids:
        status = await world.wait(
            workflow_id,
            lambda s, before=first[workflow_id]: (
                any(
                    e["event_type"] == "workflow.reset_applied" and e["payload"]["service"] == "budget_agent"
                    for e in s["timeline"]
                )
                and len(live(s, "budget.reserved")) == 1
                and live(s, "budget.reserved")[0]["event_id"] != before
                and (s.get("pending_approval") or {}).get("tier") == "manager"
            ),
            "the reset applied, the reservation taken again and the manager asked again",
            who=OPERATOR,
        )
        [requested] = [e for e in status["timeline"] if e["event_type"] == "workflow.reset_requested"]
        assert requested["payload"]["requested_by"] == "sam.operator"
        assert requested["payload"]["reason"] == f"ledger fixed (bulk action {bulk_id})"
        assert len(live(status, "budget.released")) == 1
        approved = await world.decide(status["pending_approval"]["approval_id"], MANAGER, "approve")
        assert approved.status_code == 202, approved.text
    for workflow_id in ids:
        assert (await world.ended(workflow_id))["status"] == "completed"
    payments = (await world.stats())["payments"]["by_key"].values()
    paid = sorted(p["invoice_id"] for p in payments if p["invoice_id"].startswith(f"INV-{run}"))
    assert paid == sorted(f"INV-{run}{i}" for i in range(4))  # each once
    held = await world_pg.fetch(
        "SELECT status FROM budget_agent.reservations WHERE workflow_id = ANY($1)", ids
    )
    assert [r["status"] for r in held] == ["reserved"] * 4


async def test_a_reset_not_stated_by_the_gateway_rolls_nothing_back(
    world: World, world_pg: asyncpg.Connection
) -> None:
    """Every service may write chorus.control (retries are its own), so a compromised agent
    could publish a reset of anyone's workflow there: under its own signature, or in the
    gateway's name unsigned. The budget agent and the projection refuse both (dead letters,
    unauthorized); the workflow still waits for its manager with its reservation held."""
    workflow_id, _ = await world.awaiting_manager(invoice(uuid.uuid4().hex[:8]))
    timeline = (await world.status(workflow_id, OPERATOR))["timeline"]
    validated = next(e for e in timeline if e["event_type"] == "invoice.validated")
    request = ResetRequested(
        reset_id=f"rst-{uuid.uuid4().hex}",
        point_event_id=uuid.UUID(validated["event_id"]),
        point_event_type="invoice.validated",
        undone=[uuid.UUID(e["event_id"]) for e in timeline[timeline.index(validated) + 1 :]],
        requested_by="mallory",
        reason="forged",
    )
    topic = world.registry.physical_topic(ResetRequested.event_type)
    as_agent = stated_by(
        envelope_of(request, workflow_id=workflow_id, workflow_type="procurement"), "payment_agent"
    )
    await publish(world.kafka, topic, [as_agent])  # signed with the payment agent's own key
    as_gateway = stated_by(
        envelope_of(request, workflow_id=workflow_id, workflow_type="procurement"), "gateway"
    )
    await publish(world.kafka, topic, [as_gateway], sign=False)
    for service in ("budget_agent", "audit_projector"):
        await refused_by(world, service, {str(as_agent.event_id), str(as_gateway.event_id)})
    status = await world.status(workflow_id, OPERATOR)
    assert (status["pending_approval"] or {}).get("tier") == "manager"
    kinds = [e["event_type"] for e in status["timeline"]]
    assert "workflow.reset_applied" not in kinds and "budget.released" not in kinds
    assert not any(e["undone_by"] for e in status["timeline"])
    held = await world_pg.fetchval(
        "SELECT status FROM budget_agent.reservations WHERE workflow_id = $1", workflow_id
    )
    assert held == "reserved"
    cancel = {"reason": "test over"}
    assert (
        await world.http.post(f"/v1/workflows/{workflow_id}/cancel", json=cancel, headers=SUBMITTER)
    ).status_code == 202


async def test_an_edit_and_reset_handles_the_corrected_invoice_instead_and_pays_its_amount(
    world: World, world_pg: asyncpg.Connection
) -> None:
    """Edit-and-reset: the submitted invoice said 40 hours where the vendor billed 35. An
    operator resets the waiting procurement to invoice.received with the corrected input:
    the gateway states it under a new id, the first reading and reservation are undone, and
    the workflow runs again from the corrected invoice to a payment of its amount. An input
    the event's schema refuses, or an edit of an event the gateway does not state, is a 422
    naming what is wrong, and changes nothing."""
    run = uuid.uuid4().hex[:8]
    workflow_id, _ = await world.awaiting_manager(invoice(run))
    timeline = (await world.status(workflow_id, OPERATOR))["timeline"]
    received = next(e for e in timeline if e["event_type"] == "invoice.received")
    reserved = next(e for e in timeline if e["event_type"] == "budget.reserved")
    corrected = procurement(run, total="1085.00", line="35 x GPU hours @ 31.00 EUR")["input"]
    path = f"/v1/workflows/{workflow_id}/reset"
    reason = "the vendor billed 35 hours, not 40"

    bad = await world.http.post(
        path,
        json={
            "event_id": received["event_id"],
            "reason": reason,
            "input": {**corrected, "total_cents": "lots"},
        },
        headers=OPERATOR,
    )
    assert bad.status_code == 422 and bad.json()["errors"][0]["pointer"] == "/input/total_cents", bad.text
    not_ours = await world.http.post(
        path, json={"event_id": reserved["event_id"], "reason": reason, "input": {}}, headers=OPERATOR
    )
    assert not_ours.status_code == 422 and "stated by budget_agent" in not_ours.json()["detail"]

    accepted = await world.http.post(
        path, json={"event_id": received["event_id"], "reason": reason, "input": corrected}, headers=OPERATOR
    )
    assert accepted.status_code == 202, accepted.text
    reset = accepted.json()
    assert reset["replacement_event_id"] not in (None, received["event_id"])
    assert reset["undone"][0] == "invoice.received" and "budget.reserved" in reset["undone"]

    def live(status: dict[str, Any], event_type: str) -> list[dict[str, Any]]:
        return [e for e in status["timeline"] if e["event_type"] == event_type and e["undone_by"] is None]

    status = await world.wait(
        workflow_id,
        lambda s: (
            [e["event_id"] for e in live(s, "invoice.received")] == [reset["replacement_event_id"]]
            and len(live(s, "budget.reserved")) == 1
            and (s.get("pending_approval") or {}).get("tier") == "manager"
        ),
        "the corrected invoice read, reserved for and sent to the manager",
        who=OPERATOR,
    )
    assert live(status, "budget.reserved")[0]["payload"]["amount_cents"] == 108_500
    assert (
        await world.decide(status["pending_approval"]["approval_id"], MANAGER, "approve")
    ).status_code == 202
    final = await world.ended(workflow_id)
    assert final["status"] == "completed"
    result = await world.http.get(f"/v1/workflows/{workflow_id}/result", headers=SUBMITTER)
    assert result.json()["result"]["amount_cents"] == 108_500
    paid = [
        p for p in (await world.stats())["payments"]["by_key"].values() if p["invoice_id"] == f"INV-{run}"
    ]
    assert len(paid) == 1
    held = await world_pg.fetch(
        "SELECT amount_cents FROM budget_agent.reservations WHERE workflow_id = $1", workflow_id
    )
    assert [r["amount_cents"] for r in held] == [108_500]
