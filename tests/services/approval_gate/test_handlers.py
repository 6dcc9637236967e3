"""The approval gate: a window per tier, escalation, the fallback, who may decide."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from chorus.contracts.approvals import (
    ApprovalContext,
    ApprovalDecided,
    ApprovalDecisionSubmitted,
    ApprovalEscalated,
    ApprovalFacts,
    ApprovalPolicy,
    ApprovalRequested,
    ApprovalRouted,
    ApprovalWindowElapsed,
    Decision,
    EscalationStep,
    PolicyRule,
)
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.platform import ReviewRequested
from chorus.contracts.registry import default_registry
from chorus.kernel.service import CancelTimer, ScheduleTimer
from chorus.platform.approval_gate.bootstrap import Deps, approval_chains
from chorus.platform.approval_gate.domain import DEFAULT_POLICY
from chorus.platform.approval_gate.service import SPEC
from chorus.testing import WorkflowHarness
from tests.support.examples import example
from tests.support.fakes import InMemoryPolicies

CHAIN = [EscalationStep(tier="manager", window_s=8 * 3600), EscalationStep(tier="director", window_s=3600)]
BY_BUDGET = ProducerRef(service="budget_agent", version="0")
"""Who states the requests: the service they are requested by."""
REQUEST = ApprovalRequested(
    approval_id="appr-1",
    requested_by="budget_agent",
    chain=CHAIN,
    fallback="auto_reject",
    context=ApprovalContext(summary="Invoice INV-1: 1240.00 EUR"),
)


REVIEW = [EscalationStep(tier="manager", window_s=86400)]


@pytest.fixture
def gate() -> WorkflowHarness:
    """No policy rule; the harness's workflow type ("test") declares CHAIN."""
    return WorkflowHarness(
        SPEC, Deps(REVIEW, "auto_reject", InMemoryPolicies(ApprovalPolicy()), {"test": CHAIN})
    )


def submitted(tier: str, decision: Decision = "approve") -> ApprovalDecisionSubmitted:
    return ApprovalDecisionSubmitted(
        approval_id="appr-1", decision=decision, reviewer=f"someone.{tier}", reviewer_tier=tier
    )


async def test_a_request_opens_the_first_tiers_window_on_the_gates_clock(gate: WorkflowHarness) -> None:
    step = await gate.deliver(REQUEST, "wf-1", producer=BY_BUDGET)
    [timer] = step.outcome.timers
    assert isinstance(timer, ScheduleTimer)
    assert timer.due_at == gate.clock.now() + timedelta(hours=8)
    assert timer.event == ApprovalWindowElapsed(approval_id="appr-1", level=0)


async def test_the_tier_that_waits_decides_and_its_window_is_cancelled(gate: WorkflowHarness) -> None:
    await gate.deliver(REQUEST, "wf-2", producer=BY_BUDGET)
    ignored = await gate.deliver(submitted("director"), "wf-2")  # not its turn yet
    assert ignored.emitted == []
    step = await gate.deliver(submitted("manager"), "wf-2")
    decided = step.first(ApprovalDecided)
    assert (decided.decision, decided.decided_by, decided.tier) == ("approve", "someone.manager", "manager")
    assert [type(t) for t in step.outcome.timers] == [CancelTimer]
    late = await gate.deliver(submitted("manager", "reject"), "wf-2")
    assert late.emitted == []  # a decision is final


async def test_an_unanswered_window_escalates_then_the_fallback_decides(gate: WorkflowHarness) -> None:
    await gate.deliver(REQUEST, "wf-3", producer=BY_BUDGET)
    gate.clock.advance(8 * 3600)
    step = await gate.deliver(ApprovalWindowElapsed(approval_id="appr-1", level=0), "wf-3")
    escalated = step.first(ApprovalEscalated)
    assert (escalated.from_tier, escalated.to_tier) == ("manager", "director")
    assert escalated.waiting_until == gate.clock.now() + timedelta(hours=1)
    stale = await gate.deliver(ApprovalWindowElapsed(approval_id="appr-1", level=0), "wf-3")
    assert stale.emitted == []  # that window was already acted on
    gate.clock.advance(3600)
    final = await gate.deliver(ApprovalWindowElapsed(approval_id="appr-1", level=1), "wf-3")
    decided = final.first(ApprovalDecided)
    assert (decided.decision, decided.automatic, decided.decided_by) == ("reject", True, "chorus:fallback")


async def test_a_request_chooses_neither_who_decides_nor_how_long_nor_an_automatic_approval(
    gate: WorkflowHarness,
) -> None:
    """A request (its requester's key in a forger's hands) names an editor with a
    one-second window that approves on its own. No rule matches: the workflow type's
    declared chain decides, manager then director, and unanswered it is rejected."""
    forged = REQUEST.model_copy(
        update={"chain": [EscalationStep(tier="editor", window_s=1)], "fallback": "auto_approve"}
    )
    step = await gate.deliver(forged, "wf-forged", producer=BY_BUDGET)
    routed = step.first(ApprovalRouted)
    assert (routed.rule, routed.chain, routed.fallback) == (None, CHAIN, "auto_reject")
    [timer] = step.outcome.timers
    assert isinstance(timer, ScheduleTimer) and timer.due_at == gate.clock.now() + timedelta(hours=8)
    assert (await gate.deliver(submitted("editor"), "wf-forged")).emitted == []
    gate.clock.advance(8 * 3600)
    await gate.deliver(ApprovalWindowElapsed(approval_id="appr-1", level=0), "wf-forged")
    gate.clock.advance(3600)
    final = await gate.deliver(ApprovalWindowElapsed(approval_id="appr-1", level=1), "wf-forged")
    assert final.first(ApprovalDecided).decision == "reject"


async def test_an_approval_nothing_routes_is_refused_at_once_saying_why(gate: WorkflowHarness) -> None:
    """A workflow type with no rule and no declared chain: no tier was chosen by anyone the
    gate trusts, so nobody is asked and the requester hears no at once."""
    step = await gate.deliver(REQUEST, "wf-nobody", producer=BY_BUDGET, workflow_type="unplanned")
    decided = step.first(ApprovalDecided)
    assert (decided.decision, decided.automatic, decided.decided_by) == ("reject", True, "chorus:policy")
    assert "unplanned" in decided.comment and "approval_chain" in decided.comment
    assert step.outcome.timers == [] and step.emitted_types() == ["approval.decided"]
    assert (await gate.deliver(submitted("manager"), "wf-nobody")).emitted == []


async def test_a_review_the_gate_asked_for_keeps_the_gates_own_chain(gate: WorkflowHarness) -> None:
    """Review requests are the gate's own (review.requested, CHORUS_REVIEW_CHAIN): stated by
    the gate, their chain is its word."""
    own = REQUEST.model_copy(update={"chain": REVIEW})
    by_gate = ProducerRef(service="approval_gate", version="0")
    step = await gate.deliver(gate.event(own, "wf-review", producer=by_gate))
    assert step.first(ApprovalRouted).chain == REVIEW


async def test_output_no_handler_could_get_right_becomes_an_approval_for_a_person(
    gate: WorkflowHarness,
) -> None:
    # The registry's example: the invoice agent gave up on an invoice.received's output.
    review = example(ReviewRequested)
    step = await gate.deliver(review, "wf-4")
    request = step.first(ApprovalRequested)
    assert (request.requested_by, request.chain[0].tier) == ("invoice_agent", "manager")
    assert request.context.inputs["validation_errors"] == ["/total_cents: Input should be a valid integer"]


def procurement(amount_cents: int, **facts: object) -> ApprovalRequested:
    return REQUEST.model_copy(
        update={"facts": ApprovalFacts(amount_cents=amount_cents, business_unit="cc-research", **facts)}  # type: ignore[arg-type]
    )


@pytest.fixture
def policies() -> InMemoryPolicies:
    return InMemoryPolicies(DEFAULT_POLICY)


@pytest.fixture
def routed_gate(policies: InMemoryPolicies) -> WorkflowHarness:
    return WorkflowHarness(SPEC, Deps([], "auto_reject", policies, approval_chains(default_registry())))


async def test_the_default_policy_sends_a_large_procurement_to_the_director_at_once(
    routed_gate: WorkflowHarness,
) -> None:
    step = await routed_gate.deliver(
        procurement(1_500_000), "wf-p1", producer=BY_BUDGET, workflow_type="procurement"
    )
    routed = step.first(ApprovalRouted)
    assert [s.tier for s in routed.chain] == ["director"]
    assert (routed.rule, routed.policy_version) == ("large procurement: director", 1)
    small = await routed_gate.deliver(
        procurement(124_000), "wf-p2", producer=BY_BUDGET, workflow_type="procurement"
    )
    assert small.first(ApprovalRouted).rule is None
    # workflows.yaml's chain for procurement, not the requester's
    assert small.first(ApprovalRouted).chain == [
        EscalationStep(tier="manager", window_s=8 * 3600),
        EscalationStep(tier="director", window_s=8 * 3600),
    ]
    unsure = await routed_gate.deliver(
        procurement(124_000, confidence=0.4), "wf-p3", workflow_type="procurement", producer=BY_BUDGET
    )
    assert unsure.first(ApprovalRouted).rule == "uncertain reading: manager reviews first"


async def test_a_policy_change_applies_to_the_next_approval(
    routed_gate: WorkflowHarness, policies: InMemoryPolicies
) -> None:
    rule = PolicyRule(
        name="cc-research: directors only",
        business_unit="cc-research",
        chain=[EscalationStep(tier="director", window_s=600)],
        fallback="auto_approve",
    )
    await policies.change(
        ApprovalPolicy(rules=[rule]), by="sam.operator", reason="test", now=routed_gate.clock.now()
    )
    step = await routed_gate.deliver(
        procurement(100), "wf-p4", producer=BY_BUDGET, workflow_type="procurement"
    )
    assert step.first(ApprovalRouted).policy_version == 2
    escalated = await routed_gate.deliver(ApprovalWindowElapsed(approval_id="appr-1", level=0), "wf-p4")
    assert escalated.first(ApprovalDecided).decision == "approve"  # the rule's fallback


def test_a_rule_with_a_condition_it_does_not_know_is_refused() -> None:
    with pytest.raises(ValidationError, match="amount_at_least"):
        PolicyRule.model_validate(
            {"name": "typo", "when": {"amount_at_least": 5}, "chain": [{"tier": "director", "window_s": 60}]}
        )


async def test_a_request_in_another_services_name_or_over_anothers_pending_approval_changes_nothing(
    gate: WorkflowHarness,
) -> None:
    """The report agent signs a request the budget agent would resume on: ignored. A review
    asked for while the budget agent's approval waits does not take its place: the review
    is refused, and the manager still decides the payment."""
    by_report = ProducerRef(service="report_agent", version="0")
    assert (await gate.deliver(REQUEST, "wf-names", producer=by_report)).emitted == []
    await gate.deliver(REQUEST, "wf-names", producer=BY_BUDGET)
    review = REQUEST.model_copy(update={"approval_id": "review-wf-names-1", "requested_by": "invoice_agent"})
    by_gate = ProducerRef(service="approval_gate", version="0")
    refused = await gate.deliver(gate.event(review, "wf-names", producer=by_gate))
    assert list(refused.outcome.timers) == []  # the manager's window stands
    decided = refused.first(ApprovalDecided)
    assert (decided.approval_id, decided.decision, decided.requested_by) == (
        "review-wf-names-1",
        "reject",
        "invoice_agent",
    )
    approved = (await gate.deliver(submitted("manager"), "wf-names")).first(ApprovalDecided)
    assert (approved.approval_id, approved.decision) == ("appr-1", "approve")


async def test_a_services_own_request_takes_the_slot_of_a_review_taken_first(gate: WorkflowHarness) -> None:
    """Any runtime may ask for a review of its own output, for any workflow: one that came
    first does not keep the budget agent's request out. The review is refused, saying why."""
    review = REQUEST.model_copy(update={"approval_id": "review-wf-slot-1", "requested_by": "source_fetcher"})
    by_gate = ProducerRef(service="approval_gate", version="0")
    await gate.deliver(gate.event(review, "wf-slot", producer=by_gate))
    step = await gate.deliver(REQUEST, "wf-slot", producer=BY_BUDGET)
    superseded = step.first(ApprovalDecided)
    assert (superseded.approval_id, superseded.decision, superseded.requested_by) == (
        "review-wf-slot-1",
        "reject",
        "source_fetcher",
    )
    assert step.first(ApprovalRouted).approval_id == "appr-1"
    approved = (await gate.deliver(submitted("manager"), "wf-slot")).first(ApprovalDecided)
    assert (approved.approval_id, approved.requested_by) == ("appr-1", "budget_agent")
