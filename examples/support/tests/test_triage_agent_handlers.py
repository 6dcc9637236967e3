"""triage_agent's handlers, in memory (chorus.testing): what each step decides."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
from chorus.contracts.approvals import ApprovalDecided, ApprovalRequested, EscalationStep
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.errors import PersistentError, SemanticError
from chorus.llm import OfflineModel
from chorus.service import CancelTimer, ScheduleTimer
from chorus.testing import WorkflowHarness

from support_contracts.events import TicketAnswered, TicketReceived, TicketReplyDue
from support_sandbox import SKILLS
from triage_agent.adapters.outside import Crm, Helpdesk
from triage_agent.bootstrap import Deps
from triage_agent.service import SPEC

ADA = {"customer_id": "cust-1001", "name": "Ada Lovelace", "plan": "pro"}


def outside_world(sent: list[dict[str, str]]) -> httpx.AsyncClient:
    """The CRM (one customer) and the helpdesk (which keeps what it is sent), in memory."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/crm/customers/cust-1001":
            return httpx.Response(200, json=ADA)
        if request.url.path == "/helpdesk/replies":
            sent.append({"key": request.headers["Idempotency-Key"], **json.loads(request.content)})
            return httpx.Response(201, json={"reply_id": f"reply-{len(sent)}"})
        return httpx.Response(404, json={"error": "not found"})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="http://outside")


@pytest.fixture
def sent() -> list[dict[str, str]]:
    return []


@pytest.fixture
def harness(sent: list[dict[str, str]]) -> WorkflowHarness:
    client = outside_world(sent)
    deps = Deps(
        llm=OfflineModel(SKILLS),  # the sandbox's stand-in model, in process
        crm=Crm(client, "http://outside/crm"),
        helpdesk=Helpdesk(client, "http://outside/helpdesk"),
        refund_threshold_cents=5000,
        approval_chain=[EscalationStep(tier="manager", window_s=3600)],
        reply_within_s=600,
    )
    return WorkflowHarness(SPEC, deps=deps)


def ticket(subject: str, refund_cents: int = 0, customer_id: str = "cust-1001") -> TicketReceived:
    return TicketReceived(
        customer_id=customer_id, subject=subject, body="Order 77.", refund_cents=refund_cents
    )


async def test_a_small_refund_is_answered_at_once(
    harness: WorkflowHarness, sent: list[dict[str, str]]
) -> None:
    step = await harness.deliver(ticket("Refund please", refund_cents=1200), "wf-1")
    answered = step.first(TicketAnswered)
    assert (answered.category, answered.refund_cents) == ("billing", 1200)
    assert answered.reply.startswith("Dear Ada Lovelace")
    assert step.first(WorkflowEnded).outcome == "completed"
    assert [s["customer_id"] for s in sent] == ["cust-1001"]


async def test_a_large_refund_waits_for_a_manager_and_a_reply_due_timer(
    harness: WorkflowHarness, sent: list[dict[str, str]]
) -> None:
    step = await harness.deliver(ticket("Refund please", refund_cents=25000), "wf-2")
    request = step.first(ApprovalRequested)
    assert request.facts.amount_cents == 25000 and request.chain[0].tier == "manager"
    (timer,) = step.outcome.timers
    assert isinstance(timer, ScheduleTimer) and isinstance(timer.event, TicketReplyDue)
    assert timer.due_at == harness.clock.now() + timedelta(seconds=600)
    assert sent == []  # nothing goes out before a person approved

    harness.clock.advance(600)  # the reply is due: the timer service fires the event
    await harness.deliver(TicketReplyDue(due_within_s=600), "wf-2")
    decided = ApprovalDecided(
        approval_id=request.approval_id,
        decision="approve",
        decided_by="mia",
        tier="manager",
        requested_by="triage_agent",
    )
    step = await harness.deliver(decided, "wf-2")
    assert step.first(TicketAnswered).overdue is True
    assert any(isinstance(t, CancelTimer) for t in step.outcome.timers)
    assert len(sent) == 1


async def test_a_rejected_refund_ends_the_workflow_without_a_reply(
    harness: WorkflowHarness, sent: list[dict[str, str]]
) -> None:
    step = await harness.deliver(ticket("Refund please", refund_cents=25000), "wf-3")
    approval_id = step.first(ApprovalRequested).approval_id
    decided = ApprovalDecided(
        approval_id=approval_id,
        decision="reject",
        decided_by="mia",
        tier="manager",
        requested_by="triage_agent",
    )
    step = await harness.deliver(decided, "wf-3")
    assert step.first(WorkflowEnded).outcome == "rejected"
    assert sent == []


async def test_a_misfiled_refund_is_corrected_on_the_semantic_retry(harness: WorkflowHarness) -> None:
    with pytest.raises(SemanticError) as wrong:
        await harness.deliver(ticket("MISFILED refund", refund_cents=100), "wf-4")
    assert wrong.value.errors == ["/category: a ticket asking for a refund is billing, not technical"]
    step = await harness.deliver(
        ticket("MISFILED refund", refund_cents=100), "wf-4", feedback=wrong.value.errors
    )
    assert step.first(TicketAnswered).category == "billing"


async def test_an_unknown_customer_is_a_persistent_error(harness: WorkflowHarness) -> None:
    # Retrying cannot help: the runtime dead-letters the ticket at once, with its bytes.
    with pytest.raises(PersistentError):
        await harness.deliver(ticket("Hello", customer_id="cust-9999"), "wf-5")
