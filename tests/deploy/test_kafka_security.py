"""Kafka as an attacker on the same network meets it: SCRAM over TLS, and ACLs from the registry.

Every test runs against the real broker as deploy/local/kafka.sh secures it
(``allow.everyone.if.no.acl.found=false``): principals log in with their own passwords and
the broker itself refuses what the registry does not let them do.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
from pathlib import Path

import asyncpg
import pytest
import yaml
from aiokafka.admin import NewTopic
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from pydantic import SecretStr
from typer.testing import CliRunner, Result

from chorus.contracts.registry import Registry, load_registry
from chorus.kernel.codec import encode
from chorus.kernel.kafka import KafkaAuth, kafka_auth, make_admin, make_consumer, make_producer
from chorus.privacy.signing import load_keys
from chorus.reference.payment_agent.config import Settings as PaymentSettings
from chorus.reference.payment_agent.service import SPEC as PAYMENT
from chorus.runtime.runner import running
from chorus.tools.access import Access, local_passwords
from chorus.tools.cli.main import app
from tests.support.events import approval_decided
from tests.support.kafka import approval, envelope, events_of, read_topic, signed
from tests.support.processes import run_captured
from tests.support.registry import grant_access, isolated_registry, isolated_schemas, provision
from tests.support.sealed import opened
from tests.support.submissions import procurement
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def login(name: str) -> KafkaAuth:
    """``name``'s login: this environment's protocol and CA, its own password."""
    users = Path(os.environ["CHORUS_KAFKA_USERS_DIR"])
    password = local_passwords(users, [name])[name]
    return KafkaAuth(sasl_username=name, sasl_password=SecretStr(password))


def forged_decision(registry: Registry) -> tuple[str, bytes]:
    """An approval.decided that approves a waiting procurement, as a forger would write it."""
    decided = approval_decided(approval_id="appr-wf-forged-1")
    forged = envelope(decided, workflow_id="wf-forged", workflow_type="procurement")
    return registry.physical_topic("approval.decided"), encode(forged)


async def granted(tmp_path: Path, unique: str, bootstrap: str, *, signed_starts: bool = True) -> Registry:
    """A registry of this test's own topics, with the ACLs its principals get from it."""
    registry = await isolated_registry(tmp_path, unique, bootstrap, signed_starts=signed_starts)
    await grant_access(registry, bootstrap)
    return registry


async def produce(bootstrap: str, auth: KafkaAuth, topic: str, value: bytes) -> None:
    async with make_producer(bootstrap, auth=auth) as producer:
        await producer.send_and_wait(topic, value, key=b"wf-forged")


async def test_a_service_cannot_write_a_topic_the_registry_does_not_let_it_produce(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    registry = await granted(tmp_path, unique, kafka_bootstrap)
    topic, value = forged_decision(registry)
    # The invoice agent reads approvals.events but produces nothing onto it: the broker
    # refuses its forged decision outright, so no consumer ever sees it.
    with pytest.raises(TopicAuthorizationFailedError):
        await produce(kafka_bootstrap, login("invoice_agent"), topic, value)
    # Its own topic takes its writes; the approval gate's decision topic takes the gate's.
    await produce(
        kafka_bootstrap, login("invoice_agent"), registry.physical_topic("invoice.validated"), b"{}"
    )
    await produce(kafka_bootstrap, login("approval_gate"), topic, value)
    async with make_consumer(kafka_bootstrap, topic, group_id=None) as consumer:
        records = await consumer.getmany(timeout_ms=5000)
    assert [r.value for batch in records.values() for r in batch] == [value]


async def create_topic(bootstrap: str, auth: KafkaAuth, topic: str) -> int:
    """The broker's error code for ``auth`` creating ``topic`` (0: created)."""
    admin = make_admin(bootstrap, auth=auth)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
        [(name, code, *_)] = response.topic_errors
        assert name == topic
        return int(code)
    finally:
        await admin.close()


async def test_only_the_analytics_app_creates_and_writes_the_topics_named_after_it(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    """Outcome analytics (faust) creates its own facts topic and table changelogs. Nobody
    else may create or write them: a fact forged there would be counted unchecked (the
    app verified the record it came from), so the broker refuses it outright."""
    await granted(tmp_path, unique, kafka_bootstrap)
    facts = f"outcome_analytics.t{unique}-facts"
    denied = TopicAuthorizationFailedError.errno
    assert await create_topic(kafka_bootstrap, login("invoice_agent"), facts) == denied
    assert await create_topic(kafka_bootstrap, login("outcome_analytics"), f"chorus.t{unique}") == denied
    assert await create_topic(kafka_bootstrap, login("outcome_analytics"), facts) == 0
    forged = b'{"kind":"ended","outcome":"completed"}'
    with pytest.raises(TopicAuthorizationFailedError):
        await produce(kafka_bootstrap, login("invoice_agent"), facts, forged)
    await produce(kafka_bootstrap, login("outcome_analytics"), facts, b"{}")


async def test_a_wrong_password_or_no_tls_is_refused(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    registry = await granted(tmp_path, unique, kafka_bootstrap)
    # The same settings with the right password get in: what fails below is the login.
    await produce(
        kafka_bootstrap, login("invoice_agent"), registry.physical_topic("invoice.validated"), b"{}"
    )
    wrong = KafkaAuth(sasl_username="invoice_agent", sasl_password=SecretStr("guessed"))
    with pytest.raises(KafkaConnectionError):
        await produce(kafka_bootstrap, wrong, registry.physical_topic("invoice.validated"), b"{}")
    plaintext = KafkaAuth(security_protocol="PLAINTEXT")
    with pytest.raises(KafkaConnectionError):
        await produce(kafka_bootstrap, plaintext, registry.physical_topic("invoice.validated"), b"{}")


def test_without_a_principal_a_client_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHORUS_KAFKA_SASL_USERNAME", raising=False)
    monkeypatch.delenv("CHORUS_KAFKA_SECURITY_PROTOCOL", raising=False)
    with pytest.raises(ValueError, match="CHORUS_KAFKA_SASL_USERNAME"):
        kafka_auth()


def kcat(properties: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return run_captured(
        [str(ROOT / "deploy" / "local" / "kcat.sh"), "-F", str(properties), *args], stdin=stdin, timeout_s=120
    )


async def test_kcat_as_the_auditor_reads_every_topic_but_writes_none(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    registry = await granted(tmp_path, unique, kafka_bootstrap)
    topic, value = forged_decision(registry)
    await produce(kafka_bootstrap, login("approval_gate"), topic, value)
    result = CliRunner().invoke(
        app,
        ["access", "client-config", "chorus-auditor", "--bootstrap", kafka_bootstrap],
        env={"CHORUS_KAFKA_USERS_DIR": os.environ["CHORUS_KAFKA_USERS_DIR"]},
    )
    assert result.exit_code == 0, result.output
    properties = tmp_path / "auditor.properties"
    properties.write_text(result.stdout)

    read = kcat(properties, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == value.decode()

    write = kcat(properties, "-P", "-t", topic, stdin="forged\n")
    assert write.returncode != 0
    assert "Topic authorization failed" in write.stderr


def access(schemas: Path, bootstrap: str, *args: str) -> str:
    result = CliRunner().invoke(
        app, ["access", "apply", "--schemas-dir", str(schemas), "--bootstrap", bootstrap, *args]
    )
    assert result.exit_code == 0, result.output
    return result.stdout


async def test_access_apply_grants_what_the_registry_says_and_revokes_what_it_no_longer_says(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    # A registry whose only principal is this test's, so that applying it touches no ACL
    # of the services other tests run.
    schemas = isolated_schemas(tmp_path, unique)
    registry = load_registry(schemas)
    await provision(registry, kafka_bootstrap)
    probe = f"probe-{unique}"
    own, other = registry.physical_topic("invoice.received"), registry.physical_topic("report.requested")
    principals = {
        "services": {probe: {"kind": "stream", "writes": [registry.topic_for("invoice.received").topic]}}
    }
    (schemas / "principals.yaml").write_text(yaml.safe_dump(principals))
    users = tmp_path / "users"

    first = access(schemas, kafka_bootstrap, "--users-dir", str(users))
    # WRITE and DESCRIBE on the three lanes of its topic, READ on groups named after it,
    # and (a stream app) CREATE, READ, WRITE and DESCRIBE on topics named after it.
    assert f"+ {probe}" in first and "acls: 11 added, 0 revoked" in first
    again = access(schemas, kafka_bootstrap, "--users-dir", str(users))
    assert "acls: 0 added, 0 revoked" in again

    auth = KafkaAuth(sasl_username=probe, sasl_password=SecretStr((users / f"{probe}.password").read_text()))
    await produce(kafka_bootstrap, auth, own, b"{}")
    with pytest.raises(TopicAuthorizationFailedError):
        await produce(kafka_bootstrap, auth, other, b"{}")

    principals["services"][probe]["writes"] = []
    (schemas / "principals.yaml").write_text(yaml.safe_dump(principals))
    # A grant made by hand beyond the registry (ALL on its topic) goes too.
    by_hand = AclBinding(
        ResourceType.TOPIC,
        own,
        ResourcePatternType.LITERAL,
        f"User:{probe}",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    admin = Access(kafka_bootstrap, kafka_auth())  # kept: its client must outlive the request
    admin.admin.create_acls([by_hand])[by_hand].result()
    narrowed = access(schemas, kafka_bootstrap, "--users-dir", str(users))
    assert f"- {probe}" in narrowed and "acls: 0 added, 7 revoked" in narrowed
    # With no topic left to write, the broker refuses even the idempotent producer's id.
    with pytest.raises((TopicAuthorizationFailedError, ClusterAuthorizationFailedError)):
        await produce(kafka_bootstrap, auth, own, b"{}")


def log_in_as(person: str, bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's Kafka login becomes ``person``'s, from `chorus access client-config --env`
    as a person's shell gets it (only --users-dir); the lines it printed."""
    monkeypatch.delenv("CHORUS_KAFKA_SSL_CAFILE")
    result = CliRunner().invoke(
        app,
        ["access", "client-config", person, "--env", "--bootstrap", bootstrap],
        env={"CHORUS_KAFKA_USERS_DIR": os.environ["CHORUS_KAFKA_USERS_DIR"]},
    )
    assert result.exit_code == 0, result.output
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines())
    for name, value in lines.items():
        monkeypatch.setenv(name, value)
    return lines


async def cli_produce(registry: Registry, bootstrap: str, run: str) -> Result:
    """`chorus produce invoice.received` (off this event loop: the CLI runs its own), of a
    registry that leaves it unsigned as a project may its own start requests."""
    args = ["produce", "invoice.received", "--data", json.dumps(procurement(run)["input"])]
    args += ["--schemas-dir", str(registry.root), "--bootstrap", bootstrap]
    return await asyncio.to_thread(CliRunner().invoke, app, args)


async def test_an_operator_gets_its_own_login_for_the_cli_and_may_produce(
    tmp_path: Path, kafka_bootstrap: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = await granted(tmp_path, unique, kafka_bootstrap, signed_starts=False)
    lines = log_in_as("chorus-operator", kafka_bootstrap, monkeypatch)
    assert lines["CHORUS_KAFKA_SASL_USERNAME"] == "chorus-operator"
    assert lines["CHORUS_KAFKA_SSL_CAFILE"].endswith("ca.pem")
    topic = registry.physical_topic("invoice.received")
    await produce(kafka_bootstrap, kafka_auth(), topic, b"{}")
    # It used to end in a traceback: the CLI read the topic's configs, an administrator's right.
    result = await cli_produce(registry, kafka_bootstrap, unique)
    assert result.exit_code == 0, f"{result.output}{result.exception!r}"
    assert f"to {topic} partition" in result.stdout


async def test_a_login_the_broker_refuses_is_told_so_in_one_line_and_exit_77(
    tmp_path: Path, kafka_bootstrap: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = await granted(tmp_path, unique, kafka_bootstrap, signed_starts=False)
    log_in_as("chorus-auditor", kafka_bootstrap, monkeypatch)
    result = await cli_produce(registry, kafka_bootstrap, unique)
    assert result.exit_code == 77, f"{result.output}{result.exception!r}"
    assert isinstance(result.exception, SystemExit)  # not a traceback
    [line] = result.output.splitlines()
    assert line.startswith("chorus produce: the broker refused chorus-auditor: ")
    assert "AuthorizationFailedError" in line


# -- decisions are signed: a topic's other producers cannot forge them -------------------------


async def test_a_decision_not_signed_by_the_gate_is_dead_lettered_unauthorized_and_pays_nothing(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str, pg: asyncpg.Connection
) -> None:
    # The report agent may write approvals.events (it asks for approvals there), so the
    # broker lets its forgeries through; the payment agent must not believe them.
    registry = await granted(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("approval.decided")
    signing_dir = os.environ["CHORUS_SIGNING_DIR"]
    gateway_signer = load_keys(signing_dir, "gateway", signs={"x"}, checks={}).signer
    assert gateway_signer is not None

    genuine = approval(f"wf-genuine-{unique}")
    genuine_headers = signed(genuine, []) or []
    tampered = approval(f"wf-tampered-{unique}")
    tampered_value = encode(tampered).replace(b"dana.manager", b"eve.attacker")
    records: dict[str, tuple[bytes, list[tuple[str, bytes]]]] = {
        # names itself: the registry says only the gate produces approval.decided
        "claims": (encode(approval(f"wf-claims-{unique}", "report_agent")), []),
        # claims the gate, unsigned
        "unsigned": (encode(approval(f"wf-unsigned-{unique}")), []),
        # claims the gate, signed with another service's key
        "wrong-key": (
            encode(wrong := approval(f"wf-wrongkey-{unique}")),
            [gateway_signer.header(encode(wrong))],
        ),
        # the gate's signature of another decision: altered after signing
        "tampered": (tampered_value, signed(tampered, []) or []),
        "genuine": (encode(genuine), genuine_headers),
    }
    async with make_producer(kafka_bootstrap, auth=login("report_agent")) as producer:
        for value, headers in records.values():
            await producer.send_and_wait(topic, value, key=b"k", headers=headers)

    settings = PaymentSettings(
        kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False, http_port=0,
        group_id=f"payment_agent-{unique}",
    )  # fmt: skip
    forged = {name for name in records if name != "genuine"}
    async with running(PAYMENT, settings, registry=registry):
        letters = await read_topic(
            kafka_bootstrap,
            [registry.physical_topic("event.dead_lettered")],
            until=lambda rs: len(events_of(rs, "event.dead_lettered")) >= len(forged),
        )
        approved = await wait_until(
            lambda: pg.fetchval(
                "SELECT state->>'approved_by' FROM payment_agent.state WHERE workflow_id = $1",
                genuine.workflow_id,
            ),
            what="the genuine decision to be handled",
        )
    assert approved == "dana.manager"
    # Dead-lettered by position, never under the forged envelope's ids: a forgery reusing a
    # genuine event's id must not make the genuine one look like a duplicate later.
    by_workflow = {
        json.loads(base64.b64decode(opened(payload["original"])["value_b64"]))["workflow_id"]: payload
        for payload in (letter["payload"] for letter in events_of(letters, "event.dead_lettered"))
    }
    assert sorted(by_workflow) == sorted(f"wf-{n.replace('-', '')}-{unique}" for n in forged)
    for name in forged:
        letter = by_workflow[f"wf-{name.replace('-', '')}-{unique}"]
        assert letter["error"]["category"] == "unauthorized", letter["error"]
        assert base64.b64decode(opened(letter["original"])["value_b64"]) == records[name][0]
    assert "only approval_gate produces it" in by_workflow[f"wf-claims-{unique}"]["error"]["message"]
    assert "chorus-signature header" in by_workflow[f"wf-unsigned-{unique}"]["error"]["message"]
    for name in ("wrongkey", "tampered"):
        assert "not approval_gate's signature" in by_workflow[f"wf-{name}-{unique}"]["error"]["message"]
    # None of the forged workflows got as far as a payment's state.
    rows = await pg.fetchval(
        "SELECT count(*) FROM payment_agent.state WHERE workflow_id = ANY($1::text[])",
        [f"wf-{n.replace('-', '')}-{unique}" for n in forged],
    )
    assert rows == 0
