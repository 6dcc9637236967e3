"""The payment provider, over HTTP."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from chorus.dependencies import Guarding
from chorus.external import call_json


@dataclass(frozen=True)
class PaymentReceipt:
    payment_id: str
    reference: str


class PaymentClient:
    """POST /payments with an Idempotency-Key: the provider pays each key once.

    Raises TransientError (retry later; also without calling while the provider's circuit
    breaker is open), PersistentError (credentials) or ExternalRejection (the provider
    refused this payment).
    """

    def __init__(
        self, client: httpx.AsyncClient, base_url: str, api_key: str, timeout_s: float, guard: Guarding
    ) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.guard = guard

    async def pay(
        self, *, key: str, invoice_id: str, vendor_id: str, amount_cents: int, currency: str
    ) -> PaymentReceipt:
        async with self.guard.call():
            response = await call_json(
                self.client,
                "POST",
                f"{self.base_url}/payments",
                what="payment provider",
                json={
                    "invoice_id": invoice_id,
                    "vendor_id": vendor_id,
                    "amount_cents": amount_cents,
                    "currency": currency,
                },
                headers={"Idempotency-Key": key, "Authorization": f"Bearer {self.api_key}"},
                timeout_s=self.timeout_s,
            )
        body = response.json()
        return PaymentReceipt(payment_id=str(body["payment_id"]), reference=str(body["reference"]))
