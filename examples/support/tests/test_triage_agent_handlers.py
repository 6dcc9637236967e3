"""triage_agent's handlers, in memory (chorus.testing): what each step decides."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
from chorus.contracts.approvals import ApprovalDecided, ApprovalRequested, EscalationStep
from chorus.contracts.lifecycle import AgentTurnRecorded, SpendRecorded, WorkflowEnded
from chorus.errors import PersistentError, SemanticError, TransientError
from chorus.llm import AgentLoop, OfflineModel
from chorus.service import CancelTimer, ScheduleTimer
from chorus.testing import WorkflowHarness

from support_contracts.events import TicketAnswered, TicketReceived, TicketReplyDue
from support_sandbox import TOOL_SKILLS
from triage_agent.adapters.outside import Crm, Helpdesk, crm_tools
from triage_agent.bootstrap import Deps
from triage_agent.service import SPEC

ADA = {"customer_id": "cust-1001", "name": "Ada Lovelace", "plan": "pro"}
ORDERS = [{"order_id": "ord-77", "total_cents": 32000, "refunded_cents": 2000}]


class OutsideWorld:
    """The CRM (one customer, her orders, notes) and the helpdesk, in memory: what each was
    asked and sent. ``crm_down``: the CRM answers this many requests 503 first."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.notes: dict[str, str] = {}
        self.sent: list[dict[str, str]] = []
        self.crm_down = 0

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(f"{request.method} {request.url.path}")
        if request.url.path.startswith("/crm/") and self.crm_down:
            self.crm_down -= 1
            return httpx.Response(503, json={"error": "down for a moment"})
        if request.url.path == "/crm/customers/cust-1001":
            return httpx.Response(200, json=ADA)
        if request.url.path == "/crm/customers/cust-1001/orders":
            return httpx.Response(200, json=ORDERS)
        if request.url.path == "/crm/customers/cust-1001/notes":
            self.notes.setdefault(request.headers["Idempotency-Key"], json.loads(request.content)["note"])
            return httpx.Response(201, json={"note_id": f"note-{len(self.notes)}"})
        if request.url.path == "/helpdesk/replies":
            self.sent.append({"key": request.headers["Idempotency-Key"], **json.loads(request.content)})
            return httpx.Response(201, json={"reply_id": f"reply-{len(self.sent)}"})
        return httpx.Response(404, json={"error": "not found"})


@pytest.fixture
def world() -> OutsideWorld:
    return OutsideWorld()


@pytest.fixture
def model() -> OfflineModel:
    return OfflineModel({}, TOOL_SKILLS)  # the sandbox's stand-in model, in process


@pytest.fixture
def harness(world: OutsideWorld, model: OfflineModel) -> WorkflowHarness:
    client = httpx.AsyncClient(transport=httpx.MockTransport(world.answer), base_url="http://outside")
    deps = Deps(
        agent=AgentLoop(model, crm_tools(Crm(client, "http://outside/crm")), name="triage"),
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


async def test_a_small_refund_is_answered_at_once_after_the_model_used_the_crm(
    harness: WorkflowHarness, world: OutsideWorld, model: OfflineModel
) -> None:
    step = await harness.deliver(ticket("Refund please", refund_cents=1200), "wf-1")
    answered = step.first(TicketAnswered)
    assert (answered.category, answered.refund_cents) == ("billing", 1200)
    assert answered.reply.startswith("Dear Ada Lovelace")
    assert step.first(WorkflowEnded).outcome == "completed"
    assert [s["customer_id"] for s in world.sent] == ["cust-1001"]
    # Three model turns: the customer and her orders, a note, the answer; each kept as it came.
    assert model.calls == 3 and list(world.notes.values()) == ["billing ticket: Refund please"]
    assert len(step.checkpoints) == 6  # 3 turns and 3 tool calls
    spent = step.first(SpendRecorded)  # what it used goes out with the answer
    assert (spent.model_turns, spent.tool_calls) == (3, 3) and spent.input_tokens > 0
    turns = [e for e in step.outcome.emit if isinstance(e, AgentTurnRecorded)]  # its audit trail
    assert [t.tools_called for t in turns] == [["lookup_customer", "order_history"], ["add_crm_note"], []]
    assert "Ada Lovelace" in turns[0].said.tool_calls[0].result and turns[0].said.prompt


async def test_a_refund_is_no_more_than_the_orders_left_to_refund(harness: WorkflowHarness) -> None:
    step = await harness.deliver(ticket("Refund please", refund_cents=45000), "wf-6")
    assert step.first(ApprovalRequested).facts.amount_cents == 30000  # 32000 paid, 2000 refunded


async def test_a_crm_outage_mid_loop_is_retried_without_asking_the_model_again(
    harness: WorkflowHarness, world: OutsideWorld, model: OfflineModel
) -> None:
    first = ticket("Refund please", refund_cents=1200)
    await harness.deliver(first, "wf-7")  # the CRM up: looked up once
    world.crm_down = 1  # the next ticket's first CRM call fails: the runtime retries the step
    with pytest.raises(TransientError):
        await harness.deliver(ticket("Refund please", refund_cents=1200), "wf-8")
    assert model.calls == 4  # its first turn (the lookups) is kept
    step = await harness.deliver(ticket("Refund please", refund_cents=1200), "wf-8", attempt=2)
    assert step.first(TicketAnswered).refund_cents == 1200
    assert model.calls == 6  # 3 turns each: none asked twice
    lookups = [a for a in world.asked if a == "GET /crm/customers/cust-1001"]
    assert len(lookups) == 3  # wf-7's, wf-8's refused one and its retry


async def test_a_large_refund_waits_for_a_manager_and_a_reply_due_timer(
    harness: WorkflowHarness, world: OutsideWorld
) -> None:
    step = await harness.deliver(ticket("Refund please", refund_cents=25000), "wf-2")
    request = step.first(ApprovalRequested)
    assert request.facts.amount_cents == 25000 and request.chain[0].tier == "manager"
    (timer,) = step.outcome.timers
    assert isinstance(timer, ScheduleTimer) and isinstance(timer.event, TicketReplyDue)
    assert timer.due_at == harness.clock.now() + timedelta(seconds=600)
    assert world.sent == []  # nothing goes out before a person approved

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
    assert len(world.sent) == 1


async def test_a_rejected_refund_ends_the_workflow_without_a_reply(
    harness: WorkflowHarness, world: OutsideWorld
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
    assert world.sent == []


async def test_a_misfiled_refund_is_corrected_on_the_semantic_retry(
    harness: WorkflowHarness, model: OfflineModel
) -> None:
    with pytest.raises(SemanticError) as wrong:
        await harness.deliver(ticket("MISFILED refund", refund_cents=100), "wf-4")
    assert wrong.value.errors == ["/category: a ticket asking for a refund is billing, not technical"]
    step = await harness.deliver(
        ticket("MISFILED refund", refund_cents=100), "wf-4", feedback=wrong.value.errors
    )
    assert step.first(TicketAnswered).category == "billing"
    assert model.calls == 4  # told why, the model answers again; its lookups and note are kept


async def test_an_unknown_customer_is_a_persistent_error(harness: WorkflowHarness) -> None:
    # Retrying cannot help: the runtime dead-letters the ticket at once, with its bytes.
    with pytest.raises(PersistentError):
        await harness.deliver(ticket("Hello", customer_id="cust-9999"), "wf-5")
