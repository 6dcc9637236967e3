"""The world outside Chorus: the CRM that knows the customers, the helpdesk that sends replies."""

from __future__ import annotations

import httpx
from chorus.external import call_json

from triage_agent.domain import Customer


class Crm:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self.client, self.url = client, url.rstrip("/")

    async def customer(self, customer_id: str) -> Customer:
        """The customer on record. An unknown id is a 404: call_json raises
        ExternalRejection, a persistent error, so the ticket goes to the dead letters."""
        response = await call_json(self.client, "GET", f"{self.url}/customers/{customer_id}", what="crm")
        return Customer.model_validate(response.json())


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
