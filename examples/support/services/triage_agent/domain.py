"""triage_agent's state and decisions, free of I/O."""

from __future__ import annotations

from chorus.contracts.approvals import (
    ApprovalContext,
    ApprovalFacts,
    ApprovalRequested,
    EscalationStep,
)
from chorus.llm import ChatMessage, Transcript
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


class Order(BaseModel):
    """One of the customer's orders, as the shop's order history lists it."""

    order_id: str
    total_cents: int
    refunded_cents: int = 0


class CustomerId(BaseModel):
    """The arguments of the tools that read a customer's records."""

    customer_id: str = Field(min_length=1, max_length=200)


class Note(BaseModel):
    """The arguments of the tool that writes on the customer's record in the CRM."""

    customer_id: str = Field(min_length=1, max_length=200)
    note: str = Field(min_length=1, max_length=1000)


class Triage(BaseModel):
    """What the model must answer: a category, a reply, the refund it grants."""

    category: Category
    reply: str = Field(min_length=1, max_length=4000)
    refund_cents: int = Field(ge=0)


class TriageState(BaseModel):
    """What triage_agent remembers of one ticket (its checkpoint, in PostgreSQL)."""

    ticket: TicketReceived
    transcript: Transcript | None = None
    """The agent loop's model turns and tool calls, each kept as it completes: a crash goes on
    from the last one kept."""
    customer: Customer | None = None
    triage: Triage | None = None
    waiting_for_approval: bool = False
    overdue: bool = False
    answered: bool = False

    def decided(self) -> tuple[Customer, Triage]:
        """Who the reply is for and what it says, once the ticket is triaged."""
        assert self.customer is not None and self.triage is not None, "the ticket is not triaged"
        return self.customer, self.triage


def triage_prompt(ticket: TicketReceived) -> list[dict[str, str]]:
    """Where the agent loop starts: the model looks the customer and their orders up with
    its tools, notes the ticket on the customer's record, then answers."""
    system = (
        f"task: {TASK}\n"
        "You triage customer-support tickets. Look the customer up (lookup_customer) and, when "
        "they ask for money back, their orders (order_history); note the ticket on their record "
        "(add_crm_note). Then answer with one JSON object: "
        '{"category": "billing" | "technical" | "account" | "other", "reply": str, "refund_cents": int}. '
        "Address the customer by name. Grant at most the refund asked for, and no more than "
        "their orders paid and not refunded yet."
    )
    user = (
        f"customer id: {ticket.customer_id}\n"
        f"refund asked: {ticket.refund_cents} cents\n"
        f"subject: {ticket.subject}\n{ticket.body}"
    )
    return [ChatMessage("system", system).as_json(), ChatMessage("user", user).as_json()]


def looked_up(transcript: Transcript, customer_id: str) -> tuple[Customer | None, list[Order] | None]:
    """The ticket's customer and their orders, as the tools answered the model (None: not
    looked up)."""
    customer, orders = None, None
    for result in (r for turn in transcript.turns for r in turn.results if r.error is None):
        if result.name == "lookup_customer" and result.output.get("customer_id") == customer_id:
            customer = Customer.model_validate(result.output)
        elif result.name == "order_history" and result.output.get("customer_id") == customer_id:
            orders = [Order.model_validate(o) for o in result.output["orders"]]
    return customer, orders


def semantic_errors(
    triage: Triage, ticket: TicketReceived, customer: Customer | None, orders: list[Order] | None
) -> list[str]:
    """What makes a well-formed answer wrong: the checks a schema cannot express."""
    errors = []
    if "refund" in f"{ticket.subject} {ticket.body}".lower() and triage.category != "billing":
        errors.append(f"/category: a ticket asking for a refund is billing, not {triage.category}")
    if triage.refund_cents > ticket.refund_cents:
        errors.append(f"/refund_cents: {triage.refund_cents} is more than the {ticket.refund_cents} asked")
    if customer is None:
        errors.append(f"/reply: look the customer up first (lookup_customer {ticket.customer_id})")
    elif customer.name not in triage.reply:
        errors.append(f"/reply: address the customer by name ({customer.name})")
    if triage.refund_cents and orders is None:
        errors.append("/refund_cents: look the customer's orders up before granting a refund (order_history)")
    elif orders is not None and triage.refund_cents > (paid := refundable(orders)):
        errors.append(
            f"/refund_cents: {triage.refund_cents} is more than their orders left to refund ({paid})"
        )
    return errors


def refundable(orders: list[Order]) -> int:
    return sum(o.total_cents - o.refunded_cents for o in orders)


def approval_for(state: TriageState, workflow_id: str, chain: list[EscalationStep]) -> ApprovalRequested:
    """A person decides a refund above the threshold; the reply waits meanwhile."""
    customer, triage = state.decided()
    return ApprovalRequested(
        approval_id=f"appr-{workflow_id}",
        requested_by=SERVICE,
        chain=chain,
        context=ApprovalContext(
            summary=f"refund of {triage.refund_cents / 100:.2f} to {customer.name}",
            inputs={"subject": state.ticket.subject, "reply": triage.reply},
            steps_taken=[*tools_used(state), f"classified as {triage.category}", "reply drafted and checked"],
            options=["approve", "reject"],
            why="the refund is above the threshold",
        ),
        facts=ApprovalFacts(amount_cents=triage.refund_cents),
    )


def tools_used(state: TriageState) -> list[str]:
    """The tool calls the model made, for the reviewer (what the agent looked at)."""
    turns = state.transcript.turns if state.transcript else []
    return [f"called {result.name}" for turn in turns for result in turn.results]
