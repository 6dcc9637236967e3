"""The gateway's rules without I/O: who may read a workflow, who may not decide it, when a
retried submission is the same one, and which workflow types it starts. (Signatures:
tests/services/gateway/test_webhook_signatures.py; URL fields: tests/features/outside/test_egress.py.)"""

from __future__ import annotations

import pytest

from chorus.contracts.api.gateway import Submission
from chorus.contracts.procurement import InvoiceReceived
from chorus.contracts.registry import default_registry
from chorus.platform.gateway.domain import may_read, request_hash, same_person, workflow_types
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
