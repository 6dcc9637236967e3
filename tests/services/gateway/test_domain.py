"""The gateway's rules without I/O: who may read a workflow, who may not decide it, when a
retried submission is the same one, and which workflow types it starts. (Signatures:
tests/services/gateway/test_webhook_signatures.py; URL fields: tests/features/outside/test_egress.py.)"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chorus.contracts.api.gateway import Submission
from chorus.contracts.procurement import InvoiceReceived
from chorus.contracts.registry import default_registry
from chorus.platform.gateway.domain import (
    ResetPlan,
    TimelineEvent,
    may_read,
    plan_reset,
    request_hash,
    same_person,
    workflow_types,
)
from tests.support.examples import example


@pytest.mark.parametrize(
    ("role", "principal", "tier", "allowed"),
    [
        ("operator", "ops-1", None, True),
        ("auditor", "audit-1", None, True),
        ("submitter", "sam", None, True),  # its own
        ("submitter", "kim", None, False),  # someone else's: as if it did not exist
        ("reviewer", "dana", "manager", True),  # it waits on the reviewer's tier
        ("reviewer", "erin", "director", False),
        ("reviewer", "erin", None, False),
        ("stranger", "sam", "manager", False),
    ],
)
def test_who_may_read_a_workflow_waiting_on_a_manager(
    role: str, principal: str, tier: str | None, allowed: bool
) -> None:
    assert may_read(role, principal, tier, submitter="sam", waits_on="manager", decided=False) is allowed


def test_a_reviewer_who_decided_may_read_it_after_it_stopped_waiting() -> None:
    assert may_read("reviewer", "erin", "director", submitter="sam", waits_on=None, decided=True)


def test_whoever_submitted_a_workflow_does_not_decide_its_approvals() -> None:
    assert same_person("sam", "sam")
    assert not same_person("sam", "dana")
    assert not same_person(None, "dana")  # submitted by no keyed principal: nobody to exclude


def test_a_retry_with_the_same_key_is_the_same_submission_only_when_nothing_changed() -> None:
    invoice = example(InvoiceReceived)
    first = Submission[InvoiceReceived](input=invoice, callback_url="https://hooks.example.com/done")
    again = Submission[InvoiceReceived](input=invoice, callback_url="https://hooks.example.com/done")
    assert request_hash("procurement", first) == request_hash("procurement", again)
    changed = first.model_copy(update={"priority": "high"})
    assert request_hash("procurement", changed) != request_hash("procurement", first)
    assert request_hash("research_report", first) != request_hash("procurement", first)


def test_the_registry_declares_the_workflow_types_and_settings_override_a_deadline() -> None:
    types = workflow_types(default_registry(), {"research_report": 3600.0})
    procurement = types["procurement"]
    assert (procurement.start, procurement.deadline_s) == (InvoiceReceived, 7 * 86400)
    assert types["research_report"].deadline_s == 3600.0


def _timeline(*types: str, undone_by: dict[int, str] | None = None) -> list[TimelineEvent]:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [
        TimelineEvent(f"e{i}", t, start + timedelta(seconds=i), (undone_by or {}).get(i))
        for i, t in enumerate(types)
    ]


PROCUREMENT = (
    "workflow.started",
    "invoice.received",
    "invoice.validated",
    "budget.reserved",
    "approval.requested",
    "event.dead_lettered",
)


def test_a_reset_undoes_the_steps_after_its_point_and_names_what_is_given_back() -> None:
    plan = plan_reset(_timeline(*PROCUREMENT), "e2", "waiting", ["budget.reserved"], ["payment.issued"])
    assert isinstance(plan, ResetPlan)
    assert plan.point.event_type == "invoice.validated"
    # A dead letter after the point goes with the steps (it no longer holds the workflow up).
    undone = [e.event_type for e in plan.undone]
    assert undone == ["budget.reserved", "approval.requested", "event.dead_lettered"]
    assert plan.compensated == ["budget.reserved"]


@pytest.mark.parametrize(
    ("point", "status", "expected", "says"),
    [
        ("e9", "waiting", 404, "not in the workflow's timeline"),
        ("e3", "waiting", 409, "undone by reset rst-1"),
        ("e0", "waiting", 422, "workflow.started records what happened"),
        ("e5", "waiting", 422, "event.dead_lettered records what happened"),
        ("e2", "running", 409, "the workflow is running"),
        ("e2", "completed", 409, "the workflow is completed"),
    ],
)
def test_a_reset_is_refused_saying_why(point: str, status: str, expected: int, says: str) -> None:
    refused = plan_reset(_timeline(*PROCUREMENT, undone_by={3: "rst-1"}), point, status, [], [])
    assert isinstance(refused, tuple) and refused[0] == expected and says in refused[1], refused


def test_a_reset_past_an_irreversible_event_is_refused_naming_it_whatever_the_status() -> None:
    paid = _timeline(*PROCUREMENT[:5], "payment.issued", "workflow.ended")
    refused = plan_reset(paid, "e2", "completed", ["budget.reserved"], ["payment.issued"])
    assert isinstance(refused, tuple) and refused[0] == 409
    assert refused[1].startswith(
        "payment.issued (event e5, 2026-01-01T00:00:05+00:00) came after invoice.validated"
    )
    # A reset to a step after it is not refused for it (only for the status, here).
    later = plan_reset(paid, "e6", "waiting", [], ["payment.issued"])
    assert isinstance(later, ResetPlan) and later.undone == []


def test_an_operators_correction_is_a_point_only_when_corrected_again() -> None:
    corrected = [
        *_timeline(*PROCUREMENT[:3]),
        TimelineEvent("c1", "invoice.received", datetime(2026, 1, 2, tzinfo=timezone.utc), None, "reset"),
    ]
    refused = plan_reset(corrected, "c1", "waiting", [], [])
    assert isinstance(refused, tuple) and refused[0] == 422 and "on no topic to read again" in refused[1]
    assert isinstance(plan_reset(corrected, "c1", "waiting", [], [], edit=True), ResetPlan)
