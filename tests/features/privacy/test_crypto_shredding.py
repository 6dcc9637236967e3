"""The key service on real Kafka and PostgreSQL: one live key per subject, destroyed by the
erasure request (410 from then on), and regions whose keys never leave their own store."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from chorus.base.errors import KeyUnreachableError
from chorus.base.settings import demo_key_service_credential
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.platform import SubjectErasureRequested
from chorus.contracts.registry import load_registry
from chorus.kernel.envelopes import start_envelope
from chorus.privacy.crypto import (
    ELSEWHERE,
    HttpKeyStore,
    Sealer,
    subject_hash,
)
from chorus.tools.devstack import free_port
from tests.support.apis import key_api, trust
from tests.support.kafka import publish
from tests.support.processes import ServiceProcess
from tests.support.sealed import personal_invoice
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

REGISTRY = load_registry()
CREDENTIAL = demo_key_service_credential("budget_agent")
AUTH = {"Authorization": f"Bearer {CREDENTIAL}"}


async def test_one_live_key_per_subject_until_its_erasure_destroys_it(
    key_service: str, kafka_bootstrap: str, unique: str
) -> None:
    subject = subject_hash(f"subject:keys-{unique}")
    async with httpx.AsyncClient(base_url=key_service, headers=AUTH, timeout=10, verify=trust()) as http:
        ask = {"region": "local", "subject_hash": subject, "workflow_id": f"wf-a-{unique}"}
        first = (await http.post("/v1/data-keys", json=ask)).json()
        # Another workflow of the same subject, asked by another service: the same key.
        again = (await http.post("/v1/data-keys", json={**ask, "workflow_id": f"wf-b-{unique}"})).json()
        assert first == again
        alone = {"region": "local", "workflow_id": f"wf-c-{unique}"}
        own = (await http.post("/v1/data-keys", json=alone)).json()
        assert own["kid"] != first["kid"]  # a workflow without a subject has its own
        assert (await http.get(f"/v1/data-keys/{first['kid']}")).json() == first
        # An operator's API key is no key-service credential: no key.
        anon = await http.get(
            f"/v1/data-keys/{first['kid']}", headers={"Authorization": "Bearer demo-operator-key"}
        )
        assert anon.status_code == 401
        held = await http.post("/v1/data-keys", json={**ask, "region": "mars"})
        assert held.status_code == 404 and "mars" in held.json()["detail"]

        request = SubjectErasureRequested(
            erasure_id=str(uuid.uuid4()),
            subject_hash=subject,
            actor="test",
            requested_at=datetime.now(timezone.utc),
            workflow_ids=[f"wf-c-{unique}"],
        )
        erasure = start_envelope(
            request,
            workflow_id=f"erasure-{unique}",
            workflow_type="chorus.data",
            producer=ProducerRef(service="audit_projector", version="test"),
            now=datetime.now(timezone.utc),
            idempotency_key=f"erasure-{unique}",
        )
        await publish(kafka_bootstrap, REGISTRY.physical_topic(request.event_type), [erasure])

        async def destroyed() -> bool:
            answers = [await http.get(f"/v1/data-keys/{k}") for k in (first["kid"], own["kid"])]
            return [a.status_code for a in answers] == [410, 410]

        await wait_until(destroyed, what="the erasure to destroy the subject's and its workflow's keys")
        gone = await http.get(f"/v1/data-keys/{first['kid']}")
        assert "destroyed" in gone.json()["detail"]
        # Nothing is sealed again for a workflow the erasure named (a decision posted
        # meanwhile): it would outlive the erasure under a new key.
        again_erased = await http.post("/v1/data-keys", json={**alone})
        assert again_erased.status_code == 410 and "erased" in again_erased.json()["detail"]
        # A new workflow of the subject gets a new key; what came before stays unreadable.
        fresh = (await http.post("/v1/data-keys", json={**ask, "workflow_id": f"wf-d-{unique}"})).json()
        assert fresh["kid"] != first["kid"]


@pytest.fixture
async def regions(kafka_bootstrap: str, database_url: str, tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """Two key stores, one per region, each holding only its own region's master key."""
    stores: dict[str, ServiceProcess] = {}
    ports: dict[str, int] = {}
    for region in ("eu", "us"):
        api_port = free_port()
        master = base64.b64encode(os.urandom(32)).decode()
        env = {
            "CHORUS_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "CHORUS_DATABASE_URL": database_url,
            "CHORUS_MASTER_KEYS": json.dumps({region: master}),
            "CHORUS_GROUP_ID": f"key_service-{region}-{uuid.uuid4().hex[:6]}",
            "CHORUS_API_PORT": str(api_port),
        }
        ports[region] = api_port
        stores[region] = ServiceProcess("key_service", env, tmp_path, name=f"key_service-{region}").start()
    try:
        for proc in stores.values():
            await proc.wait_healthy()
        for port in ports.values():  # its API starts beside the runtime, a moment after
            async with key_api(port):
                pass
        yield {region: f"https://127.0.0.1:{port}" for region, port in ports.items()}
    finally:
        for proc in stores.values():
            await proc.terminate()


async def test_a_service_configured_for_one_region_cannot_read_the_other_regions_fields(
    regions: dict[str, str], unique: str
) -> None:
    async with httpx.AsyncClient(timeout=10, verify=trust()) as client:

        def sealer(*names: str) -> Sealer:
            stores = {r: HttpKeyStore(r, regions[r], CREDENTIAL, client) for r in names}
            # Procurement's subjects live in the US store, research's in the EU one.
            return Sealer(REGISTRY, stores, region="eu", regions={"procurement": "us"})

        everywhere = sealer("eu", "us")
        american = await everywhere.seal(
            personal_invoice("US data", workflow_id=f"wf-us-{unique}", subject=f"s:{unique}")
        )
        european = await everywhere.seal(
            personal_invoice(
                "EU data", workflow_id=f"wf-eu-{unique}", workflow_type="research", subject=f"s:{unique}"
            )
        )
        assert american.payload["document_text"].split(":")[3].startswith("us.")
        assert european.payload["document_text"].split(":")[3].startswith("eu.")

        europe = sealer("eu")
        assert (await europe.open_event(european))["document_text"] == "EU data"
        with pytest.raises(KeyUnreachableError, match="region 'us'"):
            await europe.open_event(american)
        shown = await europe.open_all(american.payload)
        assert shown.value["document_text"] == ELSEWHERE.format(region="us") and shown.pointers == []

        # Nor does the EU store hand out (or unwrap) a US key when asked for it directly.
        kid = american.payload["document_text"].split(":")[3]
        direct = await client.get(f"{regions['eu']}/v1/data-keys/{kid}", headers=AUTH)
        assert direct.status_code == 404 and "'us' is not held" in direct.json()["detail"]
        made = await client.post(
            f"{regions['eu']}/v1/data-keys", json={"region": "us", "workflow_id": "wf-x"}, headers=AUTH
        )
        assert made.status_code == 404
        assert (await sealer("us").open_event(american))["document_text"] == "US data"
