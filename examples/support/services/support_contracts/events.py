"""Events of support: facts, named in the past tense, one class per type and version.

`chorus new event TYPE` adds one here, with its topic and an example; `chorus schemas
generate` writes its JSON Schema. Within a version only optional fields may be added; a
breaking change is a new version with an upcaster (``chorus.contracts.base.upcaster``).
"""

from __future__ import annotations

from typing import Literal

from chorus.contracts.base import Cents, EventModel, Name, Text, event

Category = Literal["billing", "technical", "account", "other"]


@event("ticket.received", 1)
class TicketReceived(EventModel):
    """A customer wrote to support (the gateway's ``support_ticket`` workflow starts here)."""

    customer_id: Name
    subject: Text
    body: Text
    refund_cents: Cents = 0
    """The refund the customer asks for, if any."""


@event("ticket.answered", 1)
class TicketAnswered(EventModel):
    """The reply went out to the customer through the helpdesk."""

    category: Category
    reply: Text
    refund_cents: Cents
    reply_id: Name
    """The helpdesk's id of the reply that was sent."""
    overdue: bool = False
    """Answered after the reply was due."""


@event("ticket.reply_due", 1)
class TicketReplyDue(EventModel):
    """Timer: the time to answer the customer is up."""

    due_within_s: float
