"""Signed decision events: who produced an event, proven per event type.

Kafka's ACLs say which principal may write a *topic*; several services share a topic
(the approval gate, the gateway and two agents all write ``approvals.events``), and the
timer and dead-letter services relay records onto topics they do not own. Nothing in a
Kafka record says which principal wrote it, so a consumer cannot ask the broker.

So the events that carry authority — the registry marks them with ``signed_by`` (an
approval's decision, a reviewer's submitted decision, an operator's discard, an erasure,
the end of a workflow) — are signed by their producer with its own Ed25519 key, and every
runtime consumer checks, before any handler runs, that

- the envelope names one of the registry's signers of its type (``producer.service``), and
- the ``chorus-signature`` header is that producer's signature of the envelope.

Most such types have one signer; ``workflow.ended`` has several (whoever takes a workflow's
last step, the gateway for cancels and deadlines, the audit projector for erasures), each
proving its own.

Anything else is a dead letter of category ``unauthorized``. The signature covers the whole
envelope (ids, type, workflow, producer, payload, times) except ``attempt``, which a
redrive raises; the header travels with the record through dead letters, retries and
redrives, so a relay can republish a decision but never make one. Only the producer holds
its private key; consumers hold public keys, so a consumer cannot sign either.

Keys live in one directory (``CHORUS_SIGNING_DIR``): ``<service>.pub`` for every signing
producer, and ``<service>.key`` (PKCS#8 PEM) for the process's own service. Locally
``chorus access signing-keys`` makes them; in a cluster, mount each service's private key
beside the public ones.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from chorus.base.errors import SigningConfigError, UnauthorizedError
from chorus.contracts.envelope import Envelope
from chorus.contracts.platform import SIGNATURE_HEADER
from chorus.contracts.registry import WORKFLOW_ENDED

HEADER = SIGNATURE_HEADER
_DOMAIN = b"chorus-signature-v1\x00"
"""Prefix of every signed message, so a signature made here means nothing elsewhere."""


def signed_content(value: Mapping[str, Any]) -> bytes:
    """What a signature covers: the envelope without ``attempt``, as canonical JSON."""
    body = {k: v for k, v in value.items() if k != "attempt"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _DOMAIN + canonical.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Signer:
    """Signs the events its service produces."""

    service: str
    key: Ed25519PrivateKey

    def header(self, value: bytes) -> tuple[str, bytes]:
        """The ``chorus-signature`` header for a record whose value is ``value``."""
        signature = self.key.sign(signed_content(json.loads(value)))
        return HEADER, base64.b64encode(signature)


@dataclass(frozen=True)
class Verifier:
    """Checks signed event types against their registered producer's public key."""

    signed_by: Mapping[str, Collection[str]]
    """event type -> the services that may state it (the registry's ``signed_by``)."""
    public_keys: Mapping[str, Ed25519PublicKey]
    endings: Mapping[str, Mapping[str, Collection[str]]] = field(default_factory=dict)
    """workflow type -> outcome -> who may end a workflow of the type so (the registry's
    ``endings``): of workflow.ended's signers, only these, for the types it names."""
    own_commands: Mapping[str, str] = field(default_factory=dict)
    """Types each runtime service states for itself (the registry's ``own_commands``: timer
    commands), each with the payload field naming whose it is: its value begins with the
    producer's name, or the command is refused (timer ids are predictable, and another
    service must not cancel, move or take first a window or deadline). A registered service
    signs its own; a service the registry does not name (a test's, a benchmark's) has no key
    and states them unsigned, which reaches nothing but its own."""

    def check(self, envelope: Envelope, value: bytes | None, headers: Iterable[tuple[str, Any]]) -> None:
        """Raise :class:`UnauthorizedError` unless an envelope of a signed type is proven to
        come from one of its registered signers (the one it names) that may state this very
        fact; other types pass."""
        event_type, claimed_producer = envelope.event_type, envelope.producer.service
        signers = self.signed_by.get(event_type)
        if not signers:
            return
        owner_field = self.own_commands.get(event_type)
        if owner_field is not None:
            self._own(envelope, owner_field)
            if claimed_producer not in signers:
                return
        if claimed_producer not in signers:
            named, verb = ", ".join(sorted(signers)), "produces" if len(signers) == 1 else "produce"
            raise UnauthorizedError(
                f"{event_type} claims producer {claimed_producer!r}; only {named} {verb} it",
                pointer="/producer/service",
            )
        self._may_end(envelope)
        producer = claimed_producer
        found = [v for k, v in headers if k == HEADER]
        if value is None or len(found) != 1 or not isinstance(found[0], bytes):
            raise UnauthorizedError(f"{event_type} without exactly one {HEADER} header from {producer}")
        try:
            signature = base64.b64decode(found[0], validate=True)
            self.public_keys[producer].verify(signature, signed_content(json.loads(value)))
        except (InvalidSignature, binascii.Error, ValueError) as exc:
            raise UnauthorizedError(
                f"{event_type}: the {HEADER} header is not {producer}'s signature of this envelope"
            ) from exc

    @staticmethod
    def _own(envelope: Envelope, owner_field: str) -> None:
        named = str(envelope.payload.get(owner_field, ""))
        owner, producer = named.split(":", 1)[0], envelope.producer.service
        if owner != producer:
            raise UnauthorizedError(
                f"{envelope.event_type} from {producer} names {owner_field} {named[:200]!r}, "
                f"which is {owner}'s: a service commands only its own",
                pointer=f"/payload/{owner_field}",
            )

    def _may_end(self, envelope: Envelope) -> None:
        """A signer of workflow.ended ends only the workflow types, with the outcomes, the
        registry gives it: the report agent's signature on a procurement's completed is
        still a forgery."""
        if envelope.event_type != WORKFLOW_ENDED:
            return
        by_outcome = self.endings.get(envelope.workflow_type)
        if by_outcome is None:
            return
        outcome = envelope.payload.get("outcome")
        allowed = by_outcome.get(str(outcome), ())
        if envelope.producer.service not in allowed:
            who = ", ".join(sorted(allowed)) or "no service"
            raise UnauthorizedError(
                f"{WORKFLOW_ENDED}({outcome}) of a {envelope.workflow_type} workflow is stated by {who}, "
                f"not {envelope.producer.service} (workflows.yaml ended_by)",
                pointer="/producer/service",
            )


@dataclass(frozen=True)
class Keys:
    signer: Signer | None
    verifier: Verifier


def load_keys(
    directory: str,
    service: str,
    *,
    signs: set[str],
    checks: Mapping[str, Collection[str]],
    endings: Mapping[str, Mapping[str, Collection[str]]] | None = None,
    own_commands: Mapping[str, str] | None = None,
) -> Keys:
    """The service's signer (when it produces any of ``signs``) and a verifier for
    ``checks`` (event type -> its signers) and ``endings`` (see :class:`Verifier`), from
    ``directory``; :class:`SigningConfigError` naming what is missing."""
    if not signs and not checks:
        return Keys(None, Verifier({}, {}))
    if not directory:
        raise SigningConfigError(
            f"{service} signs or checks decision events ({', '.join(sorted(signs | set(checks)))}): "
            "set CHORUS_SIGNING_DIR to the directory of signing keys"
        )
    root = Path(directory)
    signer = Signer(service, _private_key(root / f"{service}.key")) if signs else None
    producers = sorted({p for signers in checks.values() for p in signers})
    public = {producer: _public_key(root / f"{producer}.pub") for producer in producers}
    return Keys(signer, Verifier(dict(checks), public, dict(endings or {}), dict(own_commands or {})))


def _private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    # A key of an algorithm cryptography does not load (SM2; binary curves since 47) raises
    # UnsupportedAlgorithm, which is no ValueError: a wrong key file, not a crash.
    except (OSError, ValueError, UnsupportedAlgorithm) as exc:
        raise SigningConfigError(f"cannot read the signing key {path}: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningConfigError(f"{path} is not an Ed25519 private key")
    return key


def _public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError, UnsupportedAlgorithm) as exc:
        raise SigningConfigError(f"cannot read the public key {path}: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningConfigError(f"{path} is not an Ed25519 public key")
    return key


def make_keys(directory: Path, services: Iterable[str]) -> list[str]:
    """Create ``<service>.key`` (mode 600) and ``<service>.pub`` for each service that has
    none yet; the names of those created. Existing keys are kept (rotating one is deleting
    both files, running this, and restarting every service)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    created = []
    for service in services:
        private_path, public_path = directory / f"{service}.key", directory / f"{service}.pub"
        if private_path.exists() and public_path.exists():
            continue
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        public_path.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        created.append(service)
    return created
