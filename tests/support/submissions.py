"""What a submitter sends the gateway (POST /v1/workflows/procurement): an invoice to pay."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

UNAVAILABLE_RETRIES = 3
"""A 503 (the key service or the read model slow to answer on a loaded machine) is retried
this many times after its Retry-After, as a client that honours it would."""


def procurement(
    run: str,
    *,
    vendor: str = "vendor-acme",
    po: str = "PO-7781",
    total: str = "1240.00",
    line: str = "40 x GPU hours @ 31.00 EUR",
    number: str | None = None,
) -> dict[str, Any]:
    """Invoice ``number`` (``INV-<run>``) of ``vendor`` against purchase order ``po``: one
    ``line``, ``total`` EUR; the data subject ``subject:<run>`` asks for it. (PO-7781 is the
    budget agent's purchase order on record by default, for vendor-acme.)"""
    number = number or f"INV-{run}"
    return {
        "input": {
            "invoice_id": number,
            "vendor_id": vendor,
            "po_number": po,
            "currency": "EUR",
            "total_cents": round(float(total) * 100),
            "document_text": f"INVOICE {number}\nVendor: {vendor}\nPO: {po}\n{line}\nTotal: {total} EUR",
            "requester_ref": f"subject:{run}",
        },
        "subject_ref": f"subject:{run}",
    }


async def accepted(http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> str:
    """POST ``body`` to ``url`` until the gateway accepts it (202) and return the workflow id.
    A 503 is retried after its Retry-After with the same Idempotency-Key, so a retry never
    starts a second workflow; any other answer fails the test with the gateway's problem."""
    headers = {**headers, "Idempotency-Key": f"accepted-{uuid.uuid4().hex}"}
    response = await honouring_retry_after(lambda: http.post(url, json=body, headers=headers))
    assert response.status_code == 202, response.text
    workflow_id: str = response.json()["workflow_id"]
    return workflow_id


async def honouring_retry_after(send: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
    """``send()``'s answer; a 503 is sent again after its Retry-After, up to
    :data:`UNAVAILABLE_RETRIES` times (then its answer is the last 503)."""
    for _ in range(UNAVAILABLE_RETRIES):
        response = await send()
        if response.status_code != 503:
            return response
        await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
    return await send()
