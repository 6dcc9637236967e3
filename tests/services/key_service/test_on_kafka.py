"""The key service on real Kafka and PostgreSQL. It handles no workflow event: what reaches
it on Kafka is the erasure request, which destroys the subject's data keys and those of the
workflows it names (the API answers 410 Gone from then on, other subjects' keys live on),
confirmed once by data.removed even when the request is delivered twice."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timezone

import httpx
import pytest

from chorus.base.settings import demo_key_service_credential
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.platform import SubjectErasureRequested
from chorus.platform.key_service.config import Settings
from chorus.platform.key_service.service import SPEC
from chorus.privacy.crypto import subject_hash
from chorus.runtime.runner import running
from chorus.tools.devstack import free_port
from chorus.web.apikeys import DEMO_GATEWAY_KEY, bearer
from tests.support.apis import key_api
from tests.support.kafka import envelope, publish, refused_by
from tests.support.onkafka import OnKafka

pytestmark = pytest.mark.integration

AS_A_SERVICE = bearer(demo_key_service_credential("budget_agent"))


class Kept(logging.Handler):
    """The records of one logger, as the service wrote them (its log setup does not
    propagate to pytest's capture)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_every_key_handed_out_is_on_record_with_who_asked_and_whose_it_is(on_kafka: OnKafka) -> None:
    """A key opens a subject's personal data: each one handed out is logged with the
    caller's principal, the key id and whose key it is, and counted by principal."""
    unique = on_kafka.unique
    whose = subject_hash(f"subject:logged-{unique}")
    ask = {"region": "local", "subject_hash": whose, "workflow_id": f"wf-log-{unique}"}
    kept = Kept()
    logging.getLogger("chorus.platform.key_service.api").addHandler(kept)
    settings = on_kafka.settings(Settings, SPEC.name, api_port=free_port())
    async with running(SPEC, settings, registry=on_kafka.registry) as keys:
        assert keys.http is not None
        async with key_api(settings.api_port, headers=AS_A_SERVICE) as http:
            made = (await http.post("/v1/data-keys", json=ask)).json()["kid"]
            again = (await http.post("/v1/data-keys", json=ask)).json()["kid"]
            by_id = await http.get(f"/v1/data-keys/{made}")
        async with httpx.AsyncClient(timeout=10) as plain:
            metrics = (await plain.get(f"http://127.0.0.1:{keys.http.port}/metrics")).text
    logging.getLogger("chorus.platform.key_service.api").removeHandler(kept)
    assert made == again and by_id.status_code == 200
    handed = [
        r.fields  # type: ignore[attr-defined]
        for r in kept.records
        if r.getMessage() == "data key handed out" and r.fields["kid"] == made  # type: ignore[attr-defined]
    ]
    assert [(h["principal"], h["how"], h["subject_hash"], h["workflow_id"]) for h in handed] == [
        ("budget_agent", "live", whose, f"wf-log-{unique}"),
        ("budget_agent", "live", whose, f"wf-log-{unique}"),
        ("budget_agent", "by_id", whose, f"wf-log-{unique}"),
    ]
    assert 'chorus_data_keys_handed_out_total{how="live",principal="budget_agent"} 2.0' in metrics
    assert 'chorus_data_keys_handed_out_total{how="by_id",principal="budget_agent"} 1.0' in metrics


async def test_a_service_gets_keys_only_with_its_own_credential_and_only_if_it_handles_personal_data(
    on_kafka: OnKafka,
) -> None:
    """Each credential names its service. The source fetcher reads web pages that submitters
    choose and handles no personal field: its credential opens nothing (403). The APIs'
    keys are not key-service credentials (401), whatever their role."""
    unique = on_kafka.unique
    ask = {
        "region": "local",
        "subject_hash": subject_hash(f"subject:c-{unique}"),
        "workflow_id": f"wf-c-{unique}",
    }
    clients = {f"ks-budget-{unique}": "budget_agent", f"ks-fetcher-{unique}": "source_fetcher"}
    settings = on_kafka.settings(Settings, SPEC.name, key_service_clients=clients, api_port=free_port())
    async with running(SPEC, settings, registry=on_kafka.registry) as keys:
        assert keys.http is not None
        async with key_api(settings.api_port) as http:
            budget = await http.post("/v1/data-keys", json=ask, headers=bearer(f"ks-budget-{unique}"))
            kid = budget.json()["kid"]
            fetcher = bearer(f"ks-fetcher-{unique}")
            refused = [
                await http.post("/v1/data-keys", json=ask, headers=fetcher),
                await http.get(f"/v1/data-keys/{kid}", headers=fetcher),
            ]
            # Configured credentials replace the demo's; an API key is no credential here.
            strangers = [
                await http.get(f"/v1/data-keys/{kid}", headers=bearer(key))
                for key in (
                    demo_key_service_credential("budget_agent"),
                    DEMO_GATEWAY_KEY,
                    "demo-operator-key",
                )
            ]
    assert budget.status_code == 200
    assert [r.status_code for r in refused] == [403, 403]
    assert all("source_fetcher" in r.json()["detail"] for r in refused)
    assert [r.status_code for r in strangers] == [401, 401, 401]


async def test_an_erasure_request_destroys_the_subjects_keys_and_is_confirmed_once(on_kafka: OnKafka) -> None:
    unique = on_kafka.unique
    erased, kept = subject_hash(f"subject:erased-{unique}"), subject_hash(f"subject:kept-{unique}")
    asks = [
        {"region": "local", "subject_hash": erased, "workflow_id": f"wf-a-{unique}"},
        {"region": "local", "workflow_id": f"wf-b-{unique}"},  # the subject's, without a subject_ref
        {"region": "local", "subject_hash": kept, "workflow_id": f"wf-c-{unique}"},
    ]
    request = SubjectErasureRequested(
        erasure_id=str(uuid.uuid4()),
        subject_hash=erased,
        actor="dpo@example.test",
        requested_at=datetime.now(timezone.utc),
        workflow_ids=[f"wf-a-{unique}", f"wf-b-{unique}"],
    )
    sent = envelope(request, workflow_id=f"erasure-{unique}", workflow_type="chorus.data").model_copy(
        update={"producer": ProducerRef(service="audit_projector", version="0.1.0")}
    )
    settings = on_kafka.settings(Settings, SPEC.name, api_port=free_port())
    async with (
        running(SPEC, settings, registry=on_kafka.registry),
        key_api(settings.api_port, headers=AS_A_SERVICE) as http,
    ):
        kids = [(await http.post("/v1/data-keys", json=ask)).json()["kid"] for ask in asks]
        # Forged first: a writer of chorus.data claiming to be the projector, unsigned.
        topic = on_kafka.registry.physical_topic(request.event_type)
        await publish(on_kafka.bootstrap, topic, [sent], sign=False)
        await refused_by(on_kafka.bootstrap, on_kafka.registry, sent, {"key_service"})
        assert [(await http.get(f"/v1/data-keys/{kid}")).status_code for kid in kids] == [200, 200, 200]
        await on_kafka.publish(sent, sent)  # the same request again: a redelivery
        [confirmed] = await on_kafka.read("data.removed", sent.workflow_id, settle_s=2.0)
        answers = [(await http.get(f"/v1/data-keys/{kid}")).status_code for kid in kids]
    assert answers == [410, 410, 200]  # the subject's keys are gone for good, the other's lives
    removed = confirmed.payload
    assert (removed.request, removed.request_id, removed.service) == (
        "erasure",
        request.erasure_id,
        "key_service",
    )
    assert removed.rows["key_service.data_keys (destroyed)"] == 2


async def test_data_keys_travel_over_tls_only_and_never_on_the_plain_port(on_kafka: OnKafka) -> None:
    """A data key opens a subject's personal data: whoever can read the network between a
    service and the key service must not see one. The API answers over TLS only, with a
    certificate its callers verify; plain HTTP to its port gets no answer, and the plain
    port (/health and /metrics, for probes and Prometheus) serves no key. Before, every key
    crossed the network in clear on the plain port."""
    unique = on_kafka.unique
    ask = {"region": "local", "workflow_id": f"wf-tls-{unique}"}
    settings = on_kafka.settings(Settings, SPEC.name, api_port=free_port())
    async with running(SPEC, settings, registry=on_kafka.registry) as keys:
        assert keys.http is not None
        async with key_api(settings.api_port, headers=AS_A_SERVICE) as http:
            assert (await http.post("/v1/data-keys", json=ask)).status_code == 200
        async with httpx.AsyncClient(headers=AS_A_SERVICE, timeout=10) as plain:
            on_the_plain_port = await plain.post(f"http://127.0.0.1:{keys.http.port}/v1/data-keys", json=ask)
            with pytest.raises(httpx.HTTPError):  # the TLS port speaks no plain HTTP
                await plain.post(f"http://127.0.0.1:{settings.api_port}/v1/data-keys", json=ask)
        async with httpx.AsyncClient(headers=AS_A_SERVICE, timeout=10) as untrusting:  # the system's CAs
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusting.post(f"https://127.0.0.1:{settings.api_port}/v1/data-keys", json=ask)
    assert on_the_plain_port.status_code == 404
