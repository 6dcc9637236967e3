"""Sealing personal data (chorus.privacy.crypto): what leaves a service, what opens, what erasure
leaves behind, and what log lines may say."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from chorus.base.errors import KeyDestroyedError, KeyUnreachableError, PersistentError
from chorus.base.logs import hide_in_logs, personal_scope
from chorus.contracts.approvals import ApprovalContext, ApprovalRequested, EscalationStep
from chorus.contracts.base import SEALED_PREFIX, Sealed, is_sealed
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.platform import FireTarget, TimerSchedule
from chorus.contracts.procurement import InvoiceReceived
from chorus.contracts.registry import load_registry
from chorus.kernel.codec import encode
from chorus.kernel.envelopes import start_envelope
from chorus.observability.logs import JsonFormatter, RedactSecrets
from chorus.privacy.crypto import (
    ELSEWHERE,
    ERASED,
    UNREADABLE,
    MemoryKeyStore,
    Sealer,
    as_keyed,
    keyed_ref,
    subject_hash,
)
from tests.support.sealed import personal_invoice

REGISTRY = load_registry()
PRODUCER = ProducerRef(service="gateway", version="1")
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=timezone.utc)
MARKER = "Zoë Marker-7f3a"


def received(
    workflow_id: str = "wf-1", subject: str | None = "subject:zoe", region_type: str = "procurement"
) -> Envelope:
    text = f"INVOICE INV-1\nBill to: {MARKER}\nTotal: 1240.00 EUR"
    return personal_invoice(
        text, workflow_id=workflow_id, workflow_type=region_type, subject=subject, now=NOW
    )


def sealer(*stores: MemoryKeyStore, regions: dict[str, str] | None = None) -> Sealer:
    found = stores or (MemoryKeyStore(),)
    return Sealer(REGISTRY, {s.region: s for s in found}, region=found[0].region, regions=regions)


def appears(value: Any, needle: str) -> bool:
    return needle in json.dumps(value, ensure_ascii=False) or json.dumps(needle)[1:-1] in json.dumps(value)


async def test_personal_fields_leave_sealed_and_the_rest_of_the_event_stays_readable() -> None:
    s = sealer()
    plain = received()
    sealed = await s.seal(plain)
    assert not appears(sealed.model_dump(mode="json"), MARKER)
    token = sealed.payload["document_text"]
    assert token.startswith(SEALED_PREFIX + "local.") and f":{plain.event_id}:" in token
    # Ids, amounts, references: what replays and audits need, in clear.
    assert {k: v for k, v in sealed.payload.items() if k != "document_text"} == {
        k: v for k, v in plain.payload.items() if k != "document_text"
    }
    # A consumer that did not declare it reads personal data gets the token, typed.
    model = InvoiceReceived.model_validate(sealed.payload)
    assert isinstance(model.document_text, Sealed)
    assert json.loads(model.model_dump_json())["document_text"] == token
    # One that did gets the value back.
    assert (await s.open_event(sealed))["document_text"] == plain.payload["document_text"]


async def test_a_token_opens_only_as_the_event_it_was_sealed_for() -> None:
    s = sealer()
    sealed = await s.seal(received())
    other = sealed.model_copy(update={"event_id": uuid.uuid4()})
    with pytest.raises(PersistentError, match="sealed for event"):
        await s.open_event(other)
    # The ciphertext moved into another event's token does not open either (GCM's AAD).
    head, _, data = sealed.payload["document_text"].rpartition(":")
    forged = f"{head.rsplit(':', 1)[0]}:{other.event_id}:{data}"
    with pytest.raises(PersistentError, match="does not open"):
        await s.open(forged)


async def test_a_token_copied_into_a_new_event_is_sealed_again_for_that_event() -> None:
    s = sealer()
    first = await s.seal(received())
    copy = received().model_copy(update={"payload": first.payload})  # a new event id
    again = await s.seal(copy)
    assert again.payload["document_text"] != first.payload["document_text"]
    assert (await s.open_event(again))["document_text"] == received().payload["document_text"]


async def test_an_event_without_a_subject_is_sealed_under_its_workflows_key() -> None:
    store = MemoryKeyStore()
    s = sealer(store)
    await s.seal(received("wf-a", subject=None))
    await s.seal(received("wf-b", subject="subject:zoe"))
    await s.seal(received("wf-c", subject="subject:zoe"))
    assert sorted(store.live) == sorted([("local", "workflow:wf-a"), ("local", subject_hash("subject:zoe"))])


async def test_destroying_the_subjects_key_leaves_only_ciphertext_everywhere() -> None:
    store = MemoryKeyStore()
    writer = sealer(store)
    sealed = await writer.seal(received())
    store.destroy(("local", subject_hash("subject:zoe")))
    reader = sealer(store)  # another service, nothing cached
    with pytest.raises(KeyDestroyedError):
        await reader.open_event(sealed)
    shown = await reader.open_all(sealed.model_dump(mode="json"))
    assert shown.value["payload"]["document_text"] == ERASED
    assert shown.erased == ["/payload/document_text"] and shown.pointers == []


async def test_an_erasure_request_makes_a_service_forget_the_keys_it_cached() -> None:
    store = MemoryKeyStore()
    s = sealer(store)
    sealed = await s.seal(received())
    store.destroy(("local", subject_hash("subject:zoe")))
    assert (await s.open_event(sealed))["document_text"]  # cached, for at most key_cache_s
    s.forget(subject_hash("subject:zoe"), ["wf-1"])
    with pytest.raises(KeyDestroyedError):
        await s.open_event(sealed)


async def test_a_region_s_keys_are_made_in_its_own_store_and_read_only_where_it_is_configured() -> None:
    eu, us = MemoryKeyStore("eu"), MemoryKeyStore("us")
    both = sealer(eu, us, regions={"procurement": "us"})
    sealed = await both.seal(received(region_type="procurement"))
    assert Sealed(sealed.payload["document_text"]).split(":")[3].startswith("us.")
    assert list(us.live) and not eu.live
    europe_only = sealer(eu)
    with pytest.raises(KeyUnreachableError, match="region 'us'"):
        await europe_only.open_event(sealed)
    shown = await europe_only.open_all(sealed.payload)
    assert shown.value["document_text"] == ELSEWHERE.format(region="us")
    assert (await both.open_event(sealed))["document_text"].startswith("INVOICE INV-1")


async def test_objects_are_sealed_whole_and_open_back_to_their_model() -> None:
    s = sealer()
    context = ApprovalContext(summary=f"Invoice for {MARKER}", inputs={"total": "1240.00"})
    request = ApprovalRequested(
        approval_id="a-1",
        requested_by="budget_agent",
        chain=[EscalationStep(tier="manager", window_s=3600)],
        context=context,
    )
    plain = start_envelope(
        request,
        workflow_id="wf-1",
        workflow_type="procurement",
        producer=PRODUCER,
        now=NOW,
        idempotency_key="k",
    )
    sealed = await s.seal(plain)
    assert is_sealed(sealed.payload["context"]) and not appears(sealed.payload, MARKER)
    assert ApprovalRequested.model_validate(await s.open_event(sealed)).context == context


def test_a_malformed_token_is_refused_naming_the_field() -> None:
    body = received().payload | {"document_text": SEALED_PREFIX + "not a token"}
    with pytest.raises(ValidationError, match="document_text") as refused:
        InvoiceReceived.model_validate(body)
    assert "malformed sealed value" in str(refused.value)


def test_subject_references_are_keyed_so_a_guess_cannot_be_checked_without_the_key() -> None:
    ref = "customer-42"
    keyed = keyed_ref("secret-a", ref)
    assert keyed.startswith("hmac-sha256:") and ref not in keyed
    assert keyed == keyed_ref("secret-a", ref)  # stable
    assert keyed != keyed_ref("secret-b", ref)  # without the key, hashing guesses finds nothing
    # A submitter cannot pass another subject's keyed reference off as its own; an operator
    # may name a subject by the keyed form an envelope shows.
    assert keyed_ref("secret-a", keyed) != keyed
    assert as_keyed("secret-a", keyed) == keyed == as_keyed("secret-a", ref)


def test_opened_personal_values_never_reach_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter("svc"))
    handler.addFilter(RedactSecrets())
    lines: list[str] = []
    handler.emit = lambda record: lines.append(handler.format(record))  # type: ignore[method-assign]
    log = logging.getLogger("test.crypto.scrub")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        with personal_scope():
            hide_in_logs({"document_text": f"Bill to: {MARKER}", "note": "ok"})
            log.info(
                "read %s", f"Bill to: {MARKER}", extra={"fields": {"doc": {"text": f"Bill to: {MARKER}"}}}
            )
            try:
                raise ValueError(f"cannot parse 'Bill to: {MARKER}'")
            except ValueError:
                log.exception("handler failed")
        log.info("after the event: %s", "Bill to: nobody")
    finally:
        log.removeHandler(handler)
    text = "\n".join(lines)
    assert MARKER not in text and json.dumps(MARKER)[1:-1] not in text
    assert text.count("[personal]") >= 3
    assert "Bill to: nobody" in text  # only what was opened is hidden


async def test_a_token_of_another_subject_pasted_into_an_event_is_refused_not_reopened() -> None:
    """Else anyone could paste a token they read somewhere into their own workflow's event
    and have the runtime open it for them (and seal it under a key no erasure reaches)."""
    s = sealer()
    victims = await s.seal(received("wf-victim", subject="subject:victim"))
    mine = received("wf-mine", subject="subject:attacker")
    pasted = mine.model_copy(
        update={"payload": {**mine.payload, "document_text": victims.payload["document_text"]}}
    )
    with pytest.raises(PersistentError, match="sealed for another subject"):
        await s.seal(pasted)
    # A consumer refuses such an event before any handler or reader sees it.
    assert s.unbound(pasted) == ["/document_text"]
    assert s.unbound(victims) == []


async def test_a_sealed_value_anywhere_but_a_personal_field_is_found_wherever_it_sits() -> None:
    """Sealing puts a token only in a personal field of its own event; a reader shown an
    event would have any other token opened for them, so a consumer refuses the event."""
    s = sealer()
    victims = await s.seal(received("wf-victim", subject="subject:victim"))
    token = victims.payload["document_text"]
    mine = received("wf-mine", subject="subject:attacker")
    assert s.misplaced(victims) == []  # its own personal field: where a token belongs
    for payload, where in [
        ({"vendor_id": token}, ["/vendor_id"]),
        ({"notes": {"a/b": [1, token]}}, ["/notes/a~1b/1"]),
    ]:
        pasted = mine.model_copy(update={"payload": {**mine.payload, **payload}})
        assert s.misplaced(pasted) == where
    # A timer carries the event it will fire whole: that event's own personal fields hold
    # tokens, and only a token elsewhere in it is out of place.
    for fired, where in [(victims, []), (pasted, ["/fire/value/payload/notes/a~1b/1"])]:
        fire = FireTarget(topic="t", key=fired.workflow_id, value=json.loads(encode(fired)))
        timer = start_envelope(
            TimerSchedule(timer_id="t-1", due_at=datetime.now(timezone.utc), fire=fire),
            workflow_id="wf-mine",
            workflow_type="procurement",
            producer=ProducerRef(service="invoice_agent", version="1"),
            now=datetime.now(timezone.utc),
            idempotency_key="t-1",
        )
        assert s.misplaced(timer) == where


@pytest.mark.parametrize(
    "data",
    ["A", "AAAA", "!!!!", "A" * 30],  # too short, not base64url, shorter than nonce + tag
)
async def test_a_garbled_token_is_a_persistent_failure_and_unreadable_to_a_reader(data: str) -> None:
    s = sealer()
    token = f"{SEALED_PREFIX}local.{'0' * 32}:{uuid.uuid4()}:{data}"
    with pytest.raises(PersistentError):
        await s.open(token)
    shown = await s.open_all({"comment": token})
    assert shown.value == {"comment": UNREADABLE}  # the rest of a reader's answer stands


async def test_forgetting_an_erased_subject_drops_every_key_fetched_to_open() -> None:
    store = MemoryKeyStore()
    writer, reader = sealer(store), sealer(store)
    sealed = await writer.seal(received())
    await reader.open_event(sealed)  # the reader fetched the key by id, not by subject
    store.destroy(("local", subject_hash("subject:zoe")))
    reader.forget(subject_hash("subject:zoe"), ["wf-1"])
    with pytest.raises(KeyDestroyedError):
        await reader.open_event(sealed)


class CountingStore(MemoryKeyStore):
    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    async def data_key(self, scope: Any) -> Any:
        self.requests += 1
        return await super().data_key(scope)

    async def key(self, kid: str) -> bytes:
        self.requests += 1
        return await super().key(kid)


async def test_a_handler_that_opens_an_event_and_seals_its_answer_asks_for_the_key_once() -> None:
    store = CountingStore()
    sealed = await sealer(store).seal(received())  # the gateway's
    store.requests = 0
    agent = sealer(store)  # another service, nothing cached
    await agent.open_event(sealed)
    answer = received().model_copy(update={"event_id": uuid.uuid4()})
    await agent.seal(answer)
    assert store.requests == 1
