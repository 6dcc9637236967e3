"""triage_agent's state and decisions, free of I/O."""

from __future__ import annotations

from chorus.contracts.approvals import (
    ApprovalContext,
    ApprovalFacts,
    ApprovalRequested,
    EscalationStep,
)
from chorus.llm import ChatMessage, reprompt
from pydantic import BaseModel, Field

from support_contracts.events import Category, TicketReceived

SERVICE = "triage_agent"
"""The name this service publishes under (its ServiceSpec name, its consumer group)."""
TASK = "triage_ticket"
"""The first line of the prompt names the task (the sandbox's model answers it)."""


class Customer(BaseModel):
    """The CRM's record of a customer."""

    customer_id: str
    name: str
    plan: str


class Triage(BaseModel):
    """What the model must answer: a category, a reply, the refund it grants."""

    category: Category
    reply: str = Field(min_length=1, max_length=4000)
    refund_cents: int = Field(ge=0)


class TriageState(BaseModel):
    """What triage_agent remembers of one ticket (its checkpoint, in PostgreSQL)."""

    ticket: TicketReceived
    customer: Customer
    triage: Triage
    waiting_for_approval: bool = False
    overdue: bool = False
    answered: bool = False


def triage_prompt(ticket: TicketReceived, customer: Customer, feedback: list[str]) -> list[ChatMessage]:
    system = (
        f"task: {TASK}\n"
        "You triage customer-support tickets. Answer with one JSON object: "
        '{"category": "billing" | "technical" | "account" | "other", "reply": str, "refund_cents": int}. '
        "Address the customer by name. Grant at most the refund asked for."
    )
    user = (
        f"customer: {customer.name} ({customer.plan} plan)\n"
        f"refund asked: {ticket.refund_cents} cents\n"
        f"subject: {ticket.subject}\n{ticket.body}"
    )
    return reprompt(system, user, feedback, answer="triage")


def semantic_errors(triage: Triage, ticket: TicketReceived, customer: Customer) -> list[str]:
    """What makes a well-formed answer wrong: the checks a schema cannot express."""
    errors = []
    if "refund" in f"{ticket.subject} {ticket.body}".lower() and triage.category != "billing":
        errors.append(f"/category: a ticket asking for a refund is billing, not {triage.category}")
    if triage.refund_cents > ticket.refund_cents:
        errors.append(f"/refund_cents: {triage.refund_cents} is more than the {ticket.refund_cents} asked")
    if customer.name not in triage.reply:
        errors.append(f"/reply: address the customer by name ({customer.name})")
    return errors


def approval_for(state: TriageState, workflow_id: str, chain: list[EscalationStep]) -> ApprovalRequested:
    """A person decides a refund above the threshold; the reply waits meanwhile."""
    return ApprovalRequested(
        approval_id=f"appr-{workflow_id}",
        requested_by=SERVICE,
        chain=chain,
        context=ApprovalContext(
            summary=f"refund of {state.triage.refund_cents / 100:.2f} to {state.customer.name}",
            inputs={"subject": state.ticket.subject, "reply": state.triage.reply},
            steps_taken=[f"classified as {state.triage.category}", "reply drafted and checked"],
            options=["approve", "reject"],
            why="the refund is above the threshold",
        ),
        facts=ApprovalFacts(amount_cents=state.triage.refund_cents),
    )
