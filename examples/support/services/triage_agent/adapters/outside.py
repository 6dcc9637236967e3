"""The world outside Chorus: the CRM that knows the customers and their orders, the helpdesk
that sends replies."""

from __future__ import annotations

from typing import Any

import httpx
from chorus.external import call_json
from chorus.llm import Tool

from triage_agent.domain import Customer, CustomerId, Note, Order


class Crm:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url.rstrip("/")

    async def customer(self, customer_id: str) -> Customer:
        """The customer on record. An unknown id is a 404: call_json raises
        ExternalRejection, a persistent error, so the ticket goes to the dead letters."""
        response = await call_json(self.client, "GET", f"{self.url}/customers/{customer_id}", what="crm")
        return Customer.model_validate(response.json())

    async def orders(self, customer_id: str) -> dict[str, Any]:
        """The customer's orders (what they paid, what was refunded), for the model to read."""
        response = await call_json(
            self.client, "GET", f"{self.url}/customers/{customer_id}/orders", what="crm"
        )
        orders = [Order.model_validate(o) for o in response.json()]
        return {"customer_id": customer_id, "orders": orders}

    async def note(self, customer_id: str, note: str, *, key: str) -> str:
        """Write a note on the customer's record; a repeated key is the same note (written once)."""
        response = await call_json(
            self.client,
            "POST",
            f"{self.url}/customers/{customer_id}/notes",
            what="crm",
            json={"note": note},
            headers={"Idempotency-Key": key},
        )
        return str(response.json()["note_id"])


class Helpdesk:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url.rstrip("/")

    async def send(self, customer_id: str, reply: str, *, key: str) -> str:
        """Send the reply; the helpdesk answers a repeated key with the first reply's id, so
        a step retried after a crash does not write to the customer twice."""
        response = await call_json(
            self.client,
            "POST",
            f"{self.url}/replies",
            what="helpdesk",
            json={"customer_id": customer_id, "reply": reply},
            headers={"Idempotency-Key": key},
        )
        return str(response.json()["reply_id"])


def crm_tools(crm: Crm) -> list[Tool]:
    """What the model may do with the CRM: read a customer and their orders, note the ticket.
    The note changes the CRM, so it carries the call's idempotency key."""
    return [
        Tool(
            "lookup_customer",
            "The customer's record: name and plan.",
            CustomerId,
            lambda asked, _: crm.customer(asked.customer_id),
        ),
        Tool(
            "order_history",
            "The customer's orders: what each cost and how much of it was refunded, in cents.",
            CustomerId,
            lambda asked, _: crm.orders(asked.customer_id),
        ),
        Tool(
            "add_crm_note",
            "Write a short note on the customer's record (what the ticket is about).",
            Note,
            lambda asked, call: crm.note(asked.customer_id, asked.note, key=call.idempotency_key),
        ),
    ]
