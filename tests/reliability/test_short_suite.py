"""The reliability suite's short version, inside `make test` (a few minutes).

One deployment (every service its own process, on the shared local Kafka and a fresh
database), then in turn: a SIGKILL at one injection point in each critical service,
poison records, duplicate delivery, and timers falling due while the timer service is
down. Each scenario asserts every invariant of tests/reliability/reconciler.py.
The report goes to .local/reliability-results/<timestamp>-short/.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from chorus.reference.payment_agent.domain import payment_key
from tests.reliability.deployment import Deployment, DeploymentConfig, FaultLog
from tests.reliability.driver import Tracked, customer_id, invoice_id, report_topic
from tests.reliability.infra import KafkaCluster, PostgresServer
from tests.reliability.reconciler import (
    audit_log_complete,
    budget_consistent,
    dead_letters_exact,
    judge_effects,
    reconcile,
    replay_equals_live,
)
from tests.reliability.report import ScenarioResult, new_results_dir, summary_line, write_report
from tests.reliability.scenarios import SHORT, Scenario, run_scenario

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class ShortRun:
    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.results: list[ScenarioResult] = []


@pytest.fixture(scope="module")
async def short_run(kafka_bootstrap: str, database_url: str) -> AsyncIterator[ShortRun]:
    results_dir = new_results_dir("short")
    config = DeploymentConfig(
        "main", KafkaCluster.shared(kafka_bootstrap), PostgresServer(admin_url=database_url)
    )
    deployment = Deployment(config, results_dir)
    run = ShortRun(deployment)
    try:
        await deployment.start()
        yield run
    finally:
        passed = bool(run.results) and all(r.ok for r in run.results)
        # A failed run keeps its database and topics for the post-mortem (see the report).
        await deployment.stop(clean=passed)
        write_report(
            results_dir,
            run.results,
            title="Chorus reliability suite (short)",
            meta={"database": deployment.database, "summary": summary_line(run.results)},
        )


@pytest.mark.parametrize("scenario", SHORT, ids=[s.name for s in SHORT])
async def test_scenario_keeps_every_invariant(short_run: ShortRun, scenario: Scenario) -> None:
    result = await run_scenario(short_run.deployment, scenario)
    short_run.results.append(result)
    assert result.workflows > 0 and result.faults > 0
    assert result.ok, result.failure_message()


async def test_the_checks_fail_when_the_invariants_do_not_hold(short_run: ShortRun) -> None:
    """A negative control, after the scenarios: a workflow left at a gate is stuck, one the
    system never saw is lost, and each store-wide check notices its store tampered with."""
    dep = short_run.deployment
    waiting = await dep.driver.submit("procurement", "negative-control", approve_tiers=())
    assert await dep.driver.wait_gate([waiting], "manager", 90.0)
    ghost = Tracked(
        workflow_id="wf-never-submitted",
        kind="procurement",
        token="ghost",
        scenario="negative-control",
        expect_outcome="completed",
        expect_gate=None,
        approve_tiers=frozenset(),
        submitted_at=time.monotonic(),
    )
    dep.driver.workflows.append(ghost)
    recon = await reconcile(dep, "negative-control", FaultLog(), deadline_s=2.0)
    assert [waiting.workflow_id in s for s in recon.stuck] == [True], recon.stuck
    assert [ghost.workflow_id in s for s in recon.lost] == [True], recon.lost

    async with dep.pool.acquire() as conn:
        await conn.execute(
            """DELETE FROM audit_projector.audit_log WHERE event_id =
               (SELECT event_id FROM audit_projector.audit_log WHERE origin = 'topic' LIMIT 1)"""
        )
        await conn.execute(
            """UPDATE deadletter_service.letters SET original_value = original_value || '\\x00'::bytea
               WHERE id = (SELECT id FROM deadletter_service.letters LIMIT 1)"""
        )
        await conn.execute("UPDATE budget_agent.budgets SET reserved_cents = reserved_cents + 1")
    notes: list[str] = []
    assert any("not in the audit log" in p for p in await audit_log_complete(dep, notes))
    assert any("original bytes" in p for p in await dead_letters_exact(dep, notes))
    assert await budget_consistent(dep)
    assert await replay_equals_live(dep, notes, attempts=1)


def test_effects_beyond_one_per_idempotency_key_are_counted() -> None:
    paid = Tracked("wf-a", "procurement", "a", "x", "completed", None, frozenset(), 0.0, status="completed")
    report = Tracked("wf-b", "research_report", "b", "x", "completed", None, frozenset(), 0.0)
    unpaid = Tracked("wf-c", "procurement", "c", "x", "rejected", None, frozenset(), 0.0)
    ticket = Tracked("wf-d", "support_ticket", "d", "x", "completed", None, frozenset(), 0.0)
    unanswered = Tracked("wf-e", "support_ticket", "e", "x", "completed", None, frozenset(), 0.0)
    title = f"Report: {report_topic('b')}"
    stats = {
        "payments": {
            "by_key": {
                payment_key("wf-a", invoice_id("a")): {"invoice_id": invoice_id("a")},
                "pay:another-key": {"invoice_id": invoice_id("a")},  # a second payment
                payment_key("wf-c", invoice_id("c")): {"invoice_id": invoice_id("c")},  # must not pay
            }
        },
        "payment_requests": {payment_key("wf-a", invoice_id("a")): 3},
        "deliveries": [
            {"idempotency_key": "k1", "body": {"title": title}},
            {"idempotency_key": "k1", "body": {"title": title}},  # a retry: same key, fine
            {"idempotency_key": "k2", "body": {"title": title}},  # a second delivery
        ],
        "helpdesk": [
            {"key": "r1", "requests": 2, "customer_id": customer_id("d")},  # retried: same key, fine
            {"key": "r2", "requests": 1, "customer_id": customer_id("d")},  # a second reply
        ],
        "webhooks": [
            {"delivery": "d1", "signature_valid": True, "body": {"workflow_id": "wf-a"}},
            {"delivery": "d2", "signature_valid": True, "body": {"workflow_id": "wf-a"}},
            {"delivery": "d3", "signature_valid": True, "body": {"workflow_id": "wf-b"}},
            {"delivery": "d4", "signature_valid": True, "body": {"workflow_id": "wf-c"}},
        ],
    }
    statuses = {"wf-a": "completed", "wf-b": "completed", "wf-c": "rejected", "wf-d": "completed"}
    statuses["wf-e"] = "completed"
    judged = judge_effects(stats, [paid, report, unpaid, ticket, unanswered], statuses)
    # wf-a: 1 extra payment + 1 extra webhook; wf-b: 1 extra delivery key; wf-c: 1 payment too
    # many; wf-d: 1 extra reply key
    assert judged.duplicate_effects == 5, judged.effect_problems
    assert "wf-d: 2 reply keys for one ticket (completed)" in judged.effect_problems
    assert "wf-e: completed without a reply to the customer" in judged.effect_problems
    assert any("paid under" in p for p in judged.effect_problems)
