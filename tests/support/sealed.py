"""Sealed personal data in tests: an event that carries some, and reading it as a service
that declared it needs it would, through the key service the test session runs
(CHORUS_KEY_STORES)."""

from __future__ import annotations

import base64
import json
import os
from datetime import datetime, timezone
from typing import Any

import httpx

from chorus.base.settings import demo_key_service_credential
from chorus.contracts.base import is_sealed
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.procurement import InvoiceReceived
from chorus.kernel.envelopes import start_envelope
from chorus.privacy.crypto import Token
from tests.support.apis import trust

GATEWAY = ProducerRef(service="gateway", version="test")
AS_THE_PROJECTOR = demo_key_service_credential("audit_projector")
"""Tests read sealed values as the audit projector may: it handles every personal field."""


def personal_invoice(
    text: str,
    *,
    workflow_id: str = "wf-1",
    workflow_type: str = "procurement",
    subject: str | None = "subject:zoe",
    now: datetime | None = None,
) -> Envelope:
    """An invoice.received as the gateway publishes it for the data subject ``subject``:
    its document ``text`` is personal data (sealed when the event leaves a service)."""
    payload = InvoiceReceived(
        invoice_id="INV-1",
        vendor_id="vendor-acme",
        po_number="PO-7781",
        currency="EUR",
        total_cents=124_000,
        document_text=text,
        requester_ref="r-1",
    )
    return start_envelope(
        payload,
        workflow_id=workflow_id,
        workflow_type=workflow_type,
        producer=GATEWAY,
        now=now or datetime.now(timezone.utc),
        idempotency_key=workflow_id,
        subject_ref=subject,
    )


def opened(value: Any, key_service: str | None = None, keys: dict[str, bytes] | None = None) -> Any:
    """``value`` with every sealed token in it opened (recursively), with the keys of
    ``key_service`` (the session's, by default); a destroyed key raises. A caller that opens
    many letters passes ``keys`` to fetch each key once, not once per token (the key service
    answers slowly on a loaded machine); a test that expects a key destroyed passes none."""
    if is_sealed(value):
        token = Token.parse(value)
        key = keys.get(token.kid) if keys is not None else None
        if key is None:
            url = key_service or json.loads(os.environ["CHORUS_KEY_STORES"])[token.region]
            response = httpx.get(
                f"{url.rstrip('/')}/v1/data-keys/{token.kid}",
                headers={"Authorization": f"Bearer {AS_THE_PROJECTOR}"},
                timeout=10,
                verify=trust(),
            )
            response.raise_for_status()
            key = base64.b64decode(response.json()["key"])
            if keys is not None:
                keys[token.kid] = key
        return opened(token.open(key), key_service, keys)
    if isinstance(value, dict):
        return {k: opened(v, key_service, keys) for k, v in value.items()}
    if isinstance(value, list):
        return [opened(v, key_service, keys) for v in value]
    return value
