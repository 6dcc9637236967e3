"""Signed decision events (chorus.privacy.signing): what a signature proves, and what it survives."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from chorus.base.errors import SigningConfigError, UnauthorizedError
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.platform import DataRemoved, EventDeadLettered, RetryDue, ReviewRequested, TimerCancel
from chorus.contracts.procurement import InvoiceReceived
from chorus.contracts.registry import load_registry
from chorus.contracts.rollouts import ReleaseReported, RepinAnswered
from chorus.kernel.codec import encode
from chorus.kernel.outbox import outbox_message
from chorus.kernel.service import ServiceSpec
from chorus.privacy.feature import service_keys, unstated_types
from chorus.privacy.signing import HEADER, Keys, Verifier, load_keys, make_keys
from chorus.tools.cli.migrate import migrating_services, service_spec
from tests.support.examples import example
from tests.support.kafka import approval, envelope, stated_by

ROOT = Path(__file__).resolve().parents[3]
REGISTRY = load_registry(ROOT / "schemas")
CHECKS = REGISTRY.signed_by()


@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("signing")
    make_keys(directory, load_registry().signers())
    return directory


def decided(producer: str = "approval_gate") -> bytes:
    return encode(approval("wf-1", producer))


def check(verifier: Verifier, value: bytes, headers: list[tuple[str, bytes]]) -> None:
    """``verifier``'s check of a record whose value is ``value`` (the envelope it decodes to)."""
    verifier.check(Envelope.model_validate_json(value), value, headers)


def test_the_gates_signature_is_accepted_and_survives_a_redrive_raising_the_attempt(keys_dir: Path) -> None:
    gate = load_keys(str(keys_dir), "approval_gate", signs={"approval.decided"}, checks=CHECKS)
    assert gate.signer is not None
    value = decided()
    header = gate.signer.header(value)
    check(gate.verifier, value, [header])
    redriven = json.dumps({**json.loads(value), "attempt": 7}, separators=(",", ":")).encode()
    check(gate.verifier, redriven, [("traceparent", b"x"), header])


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("other-producer", "only approval_gate produces it"),
        ("no-header", f"exactly one {HEADER}"),
        ("two-headers", f"exactly one {HEADER}"),
        ("other-key", "not approval_gate's signature"),
        ("changed", "not approval_gate's signature"),
        ("garbage", "not approval_gate's signature"),
    ],
)
def test_anything_but_the_registered_producers_signature_is_unauthorized(
    keys_dir: Path, case: str, says: str
) -> None:
    gate = load_keys(str(keys_dir), "approval_gate", signs={"approval.decided"}, checks=CHECKS)
    gateway = load_keys(str(keys_dir), "gateway", signs={"approval.decision_submitted"}, checks=CHECKS)
    assert gate.signer is not None and gateway.signer is not None
    value = decided()
    headers = [gate.signer.header(value)]
    if case == "other-producer":
        value = decided("report_agent")
    elif case == "no-header":
        headers = []
    elif case == "two-headers":
        headers = headers * 2
    elif case == "other-key":
        headers = [gateway.signer.header(value)]
    elif case == "changed":
        value = value.replace(b'"approve"', b'"reject"')
    elif case == "garbage":
        headers = [(HEADER, b"not base64!")]
    with pytest.raises(UnauthorizedError, match=says) as refused:
        check(gate.verifier, value, headers)
    assert refused.value.category == "unauthorized"


def test_a_type_several_services_state_is_taken_from_each_only_under_its_own_signature(
    keys_dir: Path,
) -> None:
    """workflow.ended: the payment agent's end and the gateway's end both hold; an end naming
    the payment agent but signed by the gateway does not, nor one from a service that never
    ends workflows (the approval gate), even signed by it."""
    keys = {
        name: load_keys(str(keys_dir), name, signs={"workflow.ended"}, checks=CHECKS)
        for name in ("payment_agent", "gateway")
    }
    checker = keys["gateway"].verifier

    def ended(producer: str) -> bytes:
        return encode(stated_by(envelope(WorkflowEnded(outcome="completed", ended_by=producer)), producer))

    for name, own in keys.items():
        assert own.signer is not None
        value = ended(name)
        check(checker, value, [own.signer.header(value)])
    gateway_signer = keys["gateway"].signer
    assert gateway_signer is not None
    with pytest.raises(UnauthorizedError, match="not payment_agent's signature"):
        value = ended("payment_agent")
        check(checker, value, [gateway_signer.header(value)])
    gate = load_keys(str(keys_dir), "approval_gate", signs={"approval.decided"}, checks=CHECKS).signer
    assert gate is not None
    with pytest.raises(
        UnauthorizedError, match=r"only audit_projector, budget_agent, gateway, .* produce it"
    ):
        value = ended("approval_gate")
        check(checker, value, [gate.header(value)])


@pytest.mark.parametrize(
    ("workflow_type", "producer", "outcome", "refused"),
    [
        ("procurement", "payment_agent", "completed", None),
        ("procurement", "budget_agent", "compensated", None),
        ("procurement", "gateway", "timed_out", None),
        ("procurement", "audit_projector", "erased", None),
        ("research_report", "report_agent", "completed", None),
        # Each signs workflow.ended, with a valid signature, but not this end of this type.
        ("procurement", "report_agent", "completed", "stated by payment_agent, not report_agent"),
        ("procurement", "gateway", "completed", "stated by payment_agent, not gateway"),
        ("procurement", "invoice_agent", "compensated", "stated by budget_agent, not invoice_agent"),
        ("research_report", "payment_agent", "completed", "stated by report_agent, not payment_agent"),
    ],
)
def test_a_workflow_ends_only_by_whom_its_type_names_for_that_outcome(
    keys_dir: Path, workflow_type: str, producer: str, outcome: str, refused: str | None
) -> None:
    """workflows.yaml ``ended_by``: a compromised report agent's own signature on a
    procurement's "completed" (which makes the gateway tell the submitter it was paid) is
    refused like a forgery."""
    signer = load_keys(str(keys_dir), producer, signs={"workflow.ended"}, checks={}).signer
    checker = load_keys(
        str(keys_dir), "tests", signs=set(), checks=CHECKS, endings=REGISTRY.endings()
    ).verifier
    assert signer is not None
    made = envelope(WorkflowEnded(outcome=outcome, ended_by=producer), workflow_type=workflow_type)  # type: ignore[arg-type]
    value = encode(stated_by(made, producer))
    if refused is None:
        check(checker, value, [signer.header(value)])
        return
    with pytest.raises(UnauthorizedError, match=refused) as caught:
        check(checker, value, [signer.header(value)])
    assert caught.value.category == "unauthorized"


def test_unsigned_types_pass_and_the_outbox_signs_only_with_the_registered_signer(keys_dir: Path) -> None:
    gate = load_keys(str(keys_dir), "approval_gate", signs={"approval.decided"}, checks=CHECKS)
    # A type the registry does not sign (a project's may leave its own unsigned) passes.
    unsigned = envelope(example(InvoiceReceived)).model_copy(update={"event_type": "ticket.received"})
    check(gate.verifier, encode(unsigned), [])
    made = Envelope.model_validate(json.loads(decided()))
    message = outbox_message(REGISTRY, made, gate.signer)
    assert [k for k, _ in message.headers].count(HEADER) == 1
    check(gate.verifier, message.value, list(message.headers))
    gateway = load_keys(str(keys_dir), "gateway", signs={"approval.decision_submitted"}, checks=CHECKS)
    for signer in (None, gateway.signer):
        with pytest.raises(SigningConfigError, match="signed by approval_gate"):
            outbox_message(REGISTRY, made, signer)


def test_keys_are_made_once_private_ones_unreadable_to_others_and_missing_ones_stop_the_start(
    tmp_path: Path,
) -> None:
    assert make_keys(tmp_path, ["gateway"]) == ["gateway"]
    assert make_keys(tmp_path, ["gateway"]) == []  # kept, not replaced
    assert stat.S_IMODE((tmp_path / "gateway.key").stat().st_mode) == 0o600
    with pytest.raises(SigningConfigError, match="CHORUS_SIGNING_DIR"):
        load_keys("", "approval_gate", signs={"approval.decided"}, checks=CHECKS)
    with pytest.raises(SigningConfigError, match=r"approval_gate\.key"):
        load_keys(str(tmp_path), "approval_gate", signs={"approval.decided"}, checks={})
    with pytest.raises(SigningConfigError, match=r"approval_gate\.pub"):
        load_keys(str(tmp_path), "invoice_agent", signs=set(), checks=CHECKS)
    assert load_keys("", "invoice_agent", signs=set(), checks={}).signer is None


# An SM2 key pair (openssl genpkey -algorithm SM2), made for this test only: PEM that
# `cryptography` parses but cannot load, as binary-curve keys since its 47.
SM2_KEY = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqBHM9VAYItBG0wawIBAQQge/XW/Hjet039i4Ef
Z4EfbDqRsLsUNQCXj0KpBHFNRLOhRANCAASDJFR4DX3NJY3MLG6HiI2JoSzHP5qm
tNuejojTPizEvVCJKzGCWQcn1l3oyFz9PrFEX8ivSxbx3D46748ZN3G5
-----END PRIVATE KEY-----
"""
SM2_PUB = """-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoEcz1UBgi0DQgAEgyRUeA19zSWNzCxuh4iNiaEsxz+a
prTbno6I0z4sxL1QiSsxglkHJ9Zd6Mhc/T6xRF/Ir0sW8dw+Ou+PGTdxuQ==
-----END PUBLIC KEY-----
"""


def test_a_key_of_an_algorithm_cryptography_cannot_load_stops_the_start_naming_its_file(
    tmp_path: Path,
) -> None:
    """A configuration error naming the file, not an UnsupportedAlgorithm traceback."""
    (tmp_path / "approval_gate.key").write_text(SM2_KEY)
    with pytest.raises(SigningConfigError, match=r"cannot read the signing key .*approval_gate\.key"):
        load_keys(str(tmp_path), "approval_gate", signs={"approval.decided"}, checks={})
    (tmp_path / "approval_gate.pub").write_text(SM2_PUB)
    with pytest.raises(SigningConfigError, match=r"cannot read the public key .*approval_gate\.pub"):
        load_keys(str(tmp_path), "invoice_agent", signs=set(), checks=CHECKS)


@pytest.mark.parametrize("service", migrating_services(REGISTRY))
def test_every_service_may_state_every_signed_type_it_produces(service: str) -> None:
    """Else it would not start (service_keys): the registry and the code agree. (The
    support project's triage agent is started for real by tests/e2e/test_support.py.)"""
    assert unstated_types(service_spec(service), REGISTRY) == []


def test_a_service_producing_a_signed_type_it_may_not_state_does_not_start(keys_dir: Path) -> None:
    helper: ServiceSpec[Any, Any] = ServiceSpec(
        name="helper", version="0", handlers=[], produces=frozenset({"approval.requested"})
    )
    with pytest.raises(
        SigningConfigError, match=r"approval.requested by approval_gate, budget_agent, report_agent"
    ):
        service_keys(helper, REGISTRY, str(keys_dir))


def test_a_workflow_type_ended_by_a_service_that_does_not_sign_ends_is_refused(tmp_path: Path) -> None:
    schemas = tmp_path / "schemas"
    shutil.copytree(ROOT / "schemas", schemas)
    workflows = yaml.safe_load((schemas / "workflows.yaml").read_text())
    workflows["procurement"]["ended_by"]["source_fetcher"] = ["completed"]
    (schemas / "workflows.yaml").write_text(yaml.safe_dump(workflows))
    with pytest.raises(ValueError, match="procurement is ended_by source_fetcher, which does not sign"):
        load_registry(schemas)


def fetcher_keys(keys_dir: Path) -> Keys:
    """The source fetcher's keys, as its runtime loads them: it signs its own commands."""
    return load_keys(
        str(keys_dir), "source_fetcher", signs={"*"}, checks=CHECKS, own_commands=REGISTRY.own_commands()
    )


def test_a_timer_command_reaches_only_its_signers_own_timers(keys_dir: Path) -> None:
    """Each service signs its own timer commands; a command for a timer whose id begins with
    another service's name is refused however it is signed. A service no registry names (a
    test's) has no key: unsigned, it reaches its own timers and nobody else's."""
    keys = fetcher_keys(keys_dir)
    assert keys.signer is not None

    def cancel(timer_id: str, producer: str) -> bytes:
        return encode(
            stated_by(envelope(TimerCancel(timer_id=timer_id, reason="x"), workflow_id="wf-1"), producer)
        )

    own = cancel("source_fetcher:wf-1:fetch-0", "source_fetcher")
    check(keys.verifier, own, [keys.signer.header(own)])
    theirs = cancel("approval_gate:wf-1:window-appr-1-0", "source_fetcher")
    with pytest.raises(UnauthorizedError, match="approval_gate's: a service commands only its own"):
        check(keys.verifier, theirs, [keys.signer.header(theirs)])
    with pytest.raises(UnauthorizedError, match="exactly one"):  # the gate's name, not its key
        check(keys.verifier, cancel("approval_gate:wf-1:window-appr-1-0", "approval_gate"), [])
    check(keys.verifier, cancel("svc_test:wf-1:t", "svc_test"), [])
    with pytest.raises(UnauthorizedError, match="approval_gate's"):
        check(keys.verifier, cancel("approval_gate:wf-1:window-appr-1-0", "svc_test"), [])


def test_a_review_is_asked_for_by_the_service_it_names_only(keys_dir: Path) -> None:
    """The gate makes an approval "requested by" the service a review names: a runtime asks
    for reviews of its own output, signed, and names no other service."""
    keys = fetcher_keys(keys_dir)
    assert keys.signer is not None
    own, other = (
        encode(
            stated_by(envelope(example(ReviewRequested).model_copy(update={"service": s})), "source_fetcher")
        )
        for s in ("source_fetcher", "budget_agent")
    )
    check(keys.verifier, own, [keys.signer.header(own)])
    with pytest.raises(UnauthorizedError, match="budget_agent's"):
        check(keys.verifier, other, [keys.signer.header(other)])


@pytest.mark.parametrize("model", [RetryDue, EventDeadLettered, DataRemoved, ReleaseReported, RepinAnswered])
def test_what_a_runtime_states_of_its_own_service_is_taken_from_that_service_only(
    keys_dir: Path, model: type[EventModel]
) -> None:
    """A retry, a dead letter, a data removal's confirmation, a release's report and its
    answer to a re-pin each name the service they are about (``service``): only that
    service's signature counts. A compromised service cannot hand another a retry (whose
    record that service alone would then act on), file letters or confirm an erasure in its
    name, or skew a rollout with its reports."""
    keys = fetcher_keys(keys_dir)
    assert keys.signer is not None
    own, other = (
        encode(stated_by(envelope(example(model).model_copy(update={"service": s})), "source_fetcher"))
        for s in ("source_fetcher", "payment_agent")
    )
    check(keys.verifier, own, [keys.signer.header(own)])
    with pytest.raises(UnauthorizedError, match="payment_agent's: a service commands only its own"):
        check(keys.verifier, other, [keys.signer.header(other)])
    unsigned = encode(
        stated_by(envelope(example(model).model_copy(update={"service": "payment_agent"})), "payment_agent")
    )
    with pytest.raises(UnauthorizedError, match="exactly one"):  # its name, not its key
        check(keys.verifier, unsigned, [])


def test_the_analytics_streams_dead_letters_are_signed_by_it(keys_dir: Path) -> None:
    """The analytics view runs no runtime but dead-letters what it cannot read: it signs its
    letters, so nobody files one unsigned in its name (principals.yaml ``signs``)."""
    assert "outcome_analytics" in REGISTRY.signers_of("event.dead_lettered")
    analytics = load_keys(str(keys_dir), "outcome_analytics", signs={"event.dead_lettered"}, checks={}).signer
    assert analytics is not None
    letter = example(EventDeadLettered).model_copy(update={"service": "outcome_analytics"})
    value = encode(stated_by(envelope(letter), "outcome_analytics"))
    check(fetcher_keys(keys_dir).verifier, value, [analytics.header(value)])
    with pytest.raises(UnauthorizedError, match="exactly one"):
        check(fetcher_keys(keys_dir).verifier, value, [])
