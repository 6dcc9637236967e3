"""What a submitter sends the gateway (POST /v1/workflows/procurement): an invoice to pay."""

from __future__ import annotations

from typing import Any


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
