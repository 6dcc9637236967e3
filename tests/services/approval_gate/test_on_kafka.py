"""The approval gate on real Kafka and PostgreSQL: an approval request is routed by the
approval policy in force, and the window of the tier that decides is scheduled with the
timer service, measured from the request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from chorus.contracts.approvals import (
    ApprovalContext,
    ApprovalFacts,
    ApprovalRequested,
    ApprovalRouted,
    EscalationStep,
)
from chorus.platform.approval_gate.config import Settings
from chorus.platform.approval_gate.service import SPEC
from chorus.runtime.runner import running
from tests.support.database import own_database
from tests.support.kafka import envelope, stated_by
from tests.support.onkafka import OnKafka
from tests.support.sealed import opened

pytestmark = pytest.mark.integration

HOUR = 3600.0


@pytest.fixture
async def gate_database(database_url: str, unique: str) -> AsyncIterator[str]:
    """A database of the gate's own: the policy in force is the table's latest version, and
    in the shared database it is whatever an earlier run or `make demo` set last."""
    async with own_database(database_url, f"chorus_gate_{unique}") as url:
        yield url


async def test_a_large_procurement_is_routed_to_the_director_and_its_window_scheduled(
    on_kafka: OnKafka, gate_database: str
) -> None:
    workflow_id = f"wf-gate-{on_kafka.unique}"
    approval_id = f"appr-{workflow_id}-1"
    requested = ApprovalRequested(
        approval_id=approval_id,
        requested_by="budget_agent",
        chain=[
            EscalationStep(tier="manager", window_s=8 * HOUR),
            EscalationStep(tier="director", window_s=8 * HOUR),
        ],
        context=ApprovalContext(summary="Invoice INV-9 from vendor-acme: 12400.00 EUR against PO-7781"),
        facts=ApprovalFacts(amount_cents=1_240_000, business_unit="cc-research"),
    )
    sent = stated_by(
        envelope(requested, workflow_id=workflow_id, workflow_type="procurement"), "budget_agent"
    )
    settings = on_kafka.settings(Settings, SPEC.name, database_url=gate_database)
    async with running(SPEC, settings, registry=on_kafka.registry):
        before = datetime.now(timezone.utc)
        await on_kafka.publish(sent, sent)  # the same request again: a redelivery
        [routed] = await on_kafka.read("approval.routed", workflow_id, settle_s=2.0)
        [window] = await on_kafka.read("timer.schedule", workflow_id)
        after = datetime.now(timezone.utc)
    # The built-in policy (version 1): 10,000.00 or more skips the manager.
    assert routed.payload == ApprovalRouted(
        approval_id=approval_id,
        chain=[EscalationStep(tier="director", window_s=8 * HOUR)],
        fallback="auto_reject",
        policy_version=1,
        rule="large procurement: director",
    )
    timer = window.payload
    assert timer.timer_id == f"approval_gate:{workflow_id}:window-{approval_id}-0"
    assert timer.purpose == "escalation"
    # On the gate's clock, from when it routed the request (not from the time it states).
    assert before + timedelta(hours=8) <= timer.due_at <= after + timedelta(hours=8)
    fires = timer.fire.value
    assert timer.fire.topic == on_kafka.registry.physical_topic("approval.window_elapsed")
    assert (fires["event_type"], fires["workflow_id"]) == ("approval.window_elapsed", workflow_id)
    assert fires["payload"] == {"approval_id": approval_id, "level": 0}


async def test_a_signed_request_is_routed_by_the_declared_chain_and_one_nothing_routes_is_refused(
    on_kafka: OnKafka, gate_database: str
) -> None:
    """Signed by its requester, a request still chooses nothing: one naming an editor with a
    millisecond window that approves on its own waits for the manager, 8 hours, as
    workflows.yaml declares for procurement; one of a type no rule and no declaration
    routes is rejected at once, saying why."""
    unique = on_kafka.unique

    def request(workflow_id: str, workflow_type: str) -> Any:
        asked = ApprovalRequested(
            approval_id=f"appr-{workflow_id}",
            requested_by="budget_agent",
            chain=[EscalationStep(tier="editor", window_s=0.001)],
            fallback="auto_approve",
            context=ApprovalContext(summary="Invoice INV-10 from vendor-acme: 10.00 EUR"),
            facts=ApprovalFacts(amount_cents=1_000, business_unit="cc-research"),
        )
        return stated_by(
            envelope(asked, workflow_id=workflow_id, workflow_type=workflow_type), "budget_agent"
        )

    routed_one, refused_one = (
        request(f"wf-chain-{unique}", "procurement"),
        request(f"wf-none-{unique}", "unplanned"),
    )
    settings = on_kafka.settings(Settings, SPEC.name, database_url=gate_database)
    async with running(SPEC, settings, registry=on_kafka.registry):
        before = datetime.now(timezone.utc)
        await on_kafka.publish(routed_one, refused_one)
        [routed] = await on_kafka.read("approval.routed", routed_one.workflow_id)
        [window] = await on_kafka.read("timer.schedule", routed_one.workflow_id)
        [refused] = await on_kafka.read("approval.decided", refused_one.workflow_id)
        nothing = await on_kafka.read("approval.decided", routed_one.workflow_id, count=0, settle_s=1.0)
    assert (routed.payload.rule, routed.payload.fallback) == (None, "auto_reject")
    assert [(s.tier, s.window_s) for s in routed.payload.chain] == [
        ("manager", 8 * HOUR),
        ("director", 8 * HOUR),
    ]
    assert window.payload.due_at >= before + timedelta(hours=8)
    assert nothing == []
    decided = refused.payload
    assert (decided.decision, decided.automatic, opened(decided.decided_by)) == (
        "reject",
        True,
        "chorus:policy",
    )
    assert "unplanned" in opened(decided.comment)
    assert refused.envelope.producer.service == "approval_gate"  # the gate's signed word
