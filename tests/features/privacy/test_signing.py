"""Signed decision events (chorus.privacy.signing): what a signature proves, and what it survives."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from chorus.base.errors import SigningConfigError, UnauthorizedError
from chorus.kernel.codec import encode
from chorus.kernel.outbox import outbox_message
from chorus.kernel.service import ServiceSpec
from chorus.privacy.feature import service_keys, unstated_types
from chorus.privacy.signing import HEADER, load_keys, make_keys
from chorus_contracts.envelope import Envelope
from chorus_contracts.lifecycle import WorkflowEnded
from chorus_contracts.registry import load_registry
from chorus_tools.cli.migrate import migrating_services, service_spec
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


def test_the_gates_signature_is_accepted_and_survives_a_redrive_raising_the_attempt(keys_dir: Path) -> None:
    gate = load_keys(str(keys_dir), "approval_gate", signs={"approval.decided"}, checks=CHECKS)
    assert gate.signer is not None
    value = decided()
    header = gate.signer.header(value)
    gate.verifier.check("approval.decided", "approval_gate", value, [header])
    redriven = json.dumps({**json.loads(value), "attempt": 7}, separators=(",", ":")).encode()
    gate.verifier.check("approval.decided", "approval_gate", redriven, [("traceparent", b"x"), header])


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
    value, producer = decided(), "approval_gate"
    headers = [gate.signer.header(value)]
    if case == "other-producer":
        value, producer = decided("report_agent"), "report_agent"
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
        gate.verifier.check("approval.decided", producer, value, headers)
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
        checker.check("workflow.ended", name, value, [own.signer.header(value)])
    gateway_signer = keys["gateway"].signer
    assert gateway_signer is not None
    with pytest.raises(UnauthorizedError, match="not payment_agent's signature"):
        value = ended("payment_agent")
        checker.check("workflow.ended", "payment_agent", value, [gateway_signer.header(value)])
    gate = load_keys(str(keys_dir), "approval_gate", signs={"approval.decided"}, checks=CHECKS).signer
    assert gate is not None
    with pytest.raises(
        UnauthorizedError, match=r"only audit_projector, budget_agent, gateway, .* produce it"
    ):
        value = ended("approval_gate")
        checker.check("workflow.ended", "approval_gate", value, [gate.header(value)])


def test_unsigned_types_pass_and_the_outbox_signs_only_with_the_registered_signer(keys_dir: Path) -> None:
    gate = load_keys(str(keys_dir), "approval_gate", signs={"approval.decided"}, checks=CHECKS)
    gate.verifier.check("retry.due", "anyone", b"{}", [])  # not a signed type
    made = Envelope.model_validate(json.loads(decided()))
    message = outbox_message(REGISTRY, made, gate.signer)
    assert [k for k, _ in message.headers].count(HEADER) == 1
    gate.verifier.check("approval.decided", "approval_gate", message.value, message.headers)
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
