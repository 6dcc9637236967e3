"""Kafka access from the registry: each principal's ACLs, and the SCRAM users behind them.

The topic files say which service produces and consumes each topic; ``principals.yaml``
says which services run the runtime (and so also use its topics), what some write for
others (the timer fires, the dead-letter service redrives) and which people connect. From
that the exact grants follow, and nothing else: a service may write only the topics it
produces, read only those it consumes, and join only consumer groups named after it. The
broker denies whatever no ACL allows (``allow.everyone.if.no.acl.found=false``).

aiokafka has no ACL or SCRAM-user API, so provisioning uses librdkafka's admin client
(confluent-kafka), with the same login settings (``CHORUS_KAFKA_*``) as every client.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from chorus.base.compat import StrEnum
from chorus.contracts.registry import Registry
from chorus.kernel.kafka import KafkaAuth

AUDITOR_GROUP_PREFIX = "chorus-auditor"
SCRAM_ITERATIONS = 8192


class Op(StrEnum):
    READ = "READ"
    WRITE = "WRITE"
    DESCRIBE = "DESCRIBE"
    CREATE = "CREATE"


@dataclass(frozen=True, order=True)
class Grant:
    """One ACL: ``principal`` may ``op`` the topic or group ``name`` (or names starting so)."""

    principal: str
    resource: str  # "topic" | "group"
    name: str
    op: Op
    prefixed: bool = False

    def binding(self) -> AclBinding:
        return AclBinding(
            ResourceType.TOPIC if self.resource == "topic" else ResourceType.GROUP,
            self.name,
            ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL,
            f"User:{self.principal}",
            "*",
            AclOperation[self.op.value],
            AclPermissionType.ALLOW,
        )

    def __str__(self) -> str:
        pattern = f"{self.name}*" if self.prefixed else self.name
        return f"{self.principal:<20} {self.op.value:<9} {self.resource} {pattern}"


def principals(registry: Registry) -> list[str]:
    """Every principal the registry names: its services and its people."""
    return sorted([*registry.principals.services, *registry.principals.people])


def physical_topics(registry: Registry) -> list[str]:
    """Every topic of the registry as the broker names it (lanes included)."""
    return [t for spec in registry.topics.values() for t in spec.physical_topics()]


def grants(registry: Registry) -> list[Grant]:
    """The ACLs that follow from the registry, sorted by principal."""
    out: set[Grant] = set()
    every_topic = physical_topics(registry)
    for name in registry.principals.services:
        reads, writes = registry.reads(name), registry.writes(name)
        for spec in registry.topics.values():
            ops: list[Op] = []
            if spec.topic in writes:
                ops.append(Op.WRITE)
            if spec.topic in reads:
                ops.append(Op.READ)
            for topic in spec.physical_topics() if ops else []:
                out.update(Grant(name, "topic", topic, op) for op in (*ops, Op.DESCRIBE))
        # Its group, and any named after it (a replica's own group, a version's group).
        out.add(Grant(name, "group", name, Op.READ, prefixed=True))
        if registry.principals.services[name].kind == "stream":
            # A stream app's own topics (faust's changelogs, its repartitioned facts): it
            # creates them, named after it, as Kafka Streams apps do; nobody else may.
            out.update(
                Grant(name, "topic", name, op, prefixed=True)
                for op in (Op.CREATE, Op.READ, Op.WRITE, Op.DESCRIBE)
            )
        if registry.principals.services[name].observes_groups:
            out.update(
                Grant(name, "group", other, Op.DESCRIBE, prefixed=True)
                for other in registry.principals.services
            )
            out.update(Grant(name, "topic", topic, Op.DESCRIBE) for topic in every_topic)
    for name, role in registry.principals.people.items():
        ops = [Op.READ, Op.DESCRIBE] + ([Op.WRITE] if role == "operator" else [])
        out.update(Grant(name, "topic", topic, op) for topic in every_topic for op in ops)
        if role == "operator":
            out.add(Grant(name, "group", "*", Op.READ))
        else:
            out.add(Grant(name, "group", AUDITOR_GROUP_PREFIX, Op.READ, prefixed=True))
    return sorted(out)


def _from_binding(binding: AclBinding) -> Grant | None:
    """A broker ACL as a Grant, or None when it is not one Chorus would write."""
    kind = {ResourceType.TOPIC: "topic", ResourceType.GROUP: "group"}.get(binding.restype)
    if (
        kind is None
        or not binding.principal.startswith("User:")
        or binding.permission_type != AclPermissionType.ALLOW
        or binding.host != "*"
        or binding.operation.name not in Op.__members__
        or binding.resource_pattern_type not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED)
    ):
        return None
    return Grant(
        binding.principal.removeprefix("User:"),
        kind,
        binding.name,
        Op(binding.operation.name),
        prefixed=binding.resource_pattern_type == ResourcePatternType.PREFIXED,
    )


def describe(binding: AclBinding) -> str:
    """An ACL as `chorus access` prints it (a Grant's line, or the broker's words for one
    Chorus would never write)."""
    grant = _from_binding(binding)
    if grant is not None:
        return str(grant)
    pattern = "*" if binding.resource_pattern_type == ResourcePatternType.PREFIXED else ""
    who, op = binding.principal.removeprefix("User:"), binding.operation.name
    extra = f"({binding.permission_type.name}, host {binding.host})"
    return f"{who:<20} {op:<9} {binding.restype.name.lower()} {binding.name}{pattern} {extra}"


@dataclass(frozen=True)
class Plan:
    add: list[Grant]
    revoke: list[AclBinding]
    """Every ACL of the registry's principals that does not follow from it: on its topics,
    on groups, on the cluster, any operation, any pattern."""
    foreign: int
    """ACLs left alone: of principals the registry does not name (other applications', or
    principals removed from it: revoke those by hand), and the registry's principals' ACLs
    on literal topics outside it (a cluster hosts other registries' topics, tests' too)."""


def _any_acl(
    restype: Any = ResourceType.ANY, name: str | None = None, pattern: Any = ResourcePatternType.ANY
) -> Any:
    return AclBindingFilter(restype, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)


class Access:
    """The broker's ACLs and SCRAM users, through an admin principal's login."""

    def __init__(self, bootstrap: str, auth: KafkaAuth, *, timeout_s: float = 15.0) -> None:
        self.timeout_s = timeout_s
        self.admin = AdminClient(
            {"bootstrap.servers": bootstrap, **librdkafka(auth), "socket.timeout.ms": int(timeout_s * 1000)}
        )

    def current(self) -> list[AclBinding]:
        try:
            found: list[AclBinding] = self.admin.describe_acls(
                _any_acl(), request_timeout=self.timeout_s
            ).result()
        except Exception as exc:  # an unreachable broker, a principal that may not describe ACLs
            raise RuntimeError(f"cannot read the broker's ACLs: {exc}") from exc
        return found

    def plan(self, registry: Registry) -> Plan:
        wanted = set(grants(registry))
        managed = {f"User:{name}" for name in principals(registry)}
        topics = set(physical_topics(registry))
        have: set[Grant] = set()
        revoke: list[AclBinding] = []
        foreign = 0
        for binding in self.current():
            outside = (
                binding.restype == ResourceType.TOPIC
                and binding.resource_pattern_type == ResourcePatternType.LITERAL
                and binding.name not in topics
            )
            if binding.principal not in managed or outside:
                foreign += 1
                continue
            grant = _from_binding(binding)
            if grant is not None and grant in wanted:
                have.add(grant)
            else:
                revoke.append(binding)
        revoke.sort(key=describe)
        return Plan(add=sorted(wanted - have), revoke=revoke, foreign=foreign)

    def apply(self, plan: Plan) -> None:
        if plan.add:
            _wait(self.admin.create_acls([g.binding() for g in plan.add], request_timeout=self.timeout_s))
        for start in range(0, len(plan.revoke), 100):
            filters = [_exact_filter(binding) for binding in plan.revoke[start : start + 100]]
            _wait(self.admin.delete_acls(filters, request_timeout=self.timeout_s))

    def revoke_topics(self, topics: Iterable[str]) -> None:
        """Delete every ACL on these (literal) topic names: the broker keeps a deleted
        topic's ACLs, and would grant them again to a topic created with the same name."""
        filters = [
            _any_acl(ResourceType.TOPIC, name, ResourcePatternType.LITERAL) for name in sorted(set(topics))
        ]
        # The broker deletes at most 10,000 ACLs per request; a topic has a few dozen.
        for start in range(0, len(filters), 100):
            _wait(self.admin.delete_acls(filters[start : start + 100], request_timeout=self.timeout_s))

    def upsert_users(self, passwords: dict[str, str]) -> None:
        """Create each principal's SCRAM-SHA-512 credential, or reset it to ``passwords``."""
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
        upserts = [UserScramCredentialUpsertion(u, info, p.encode()) for u, p in sorted(passwords.items())]
        if upserts:
            _wait(self.admin.alter_user_scram_credentials(upserts, request_timeout=self.timeout_s))


def _exact_filter(binding: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


def _wait(futures: dict[Any, Any]) -> None:
    """Every future's result; the first failure raised with what it was about."""
    for what, future in futures.items():
        try:
            future.result()
        except Exception as exc:
            raise RuntimeError(f"{what}: {exc}") from exc


def local_passwords(users_dir: Path, names: Iterable[str]) -> dict[str, str]:
    """Each principal's password from ``users_dir/<name>.password``, made (random) if missing.

    For a local stack only: a real deployment keeps its passwords in its secret store and
    gives each service its own through CHORUS_KAFKA_SASL_PASSWORD."""
    users_dir.mkdir(parents=True, exist_ok=True)
    users_dir.chmod(0o700)
    out: dict[str, str] = {}
    for name in names:
        path = users_dir / f"{name}.password"
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(secrets.token_urlsafe(24))
        out[name] = path.read_text().strip()
    return out


def local_password(users_dir: Path, name: str) -> str | None:
    """``name``'s password in a local stack's users folder, or None when it has none."""
    path = users_dir / f"{name}.password"
    return path.read_text().strip() if path.is_file() else None


def client_properties(bootstrap: str, auth: KafkaAuth) -> str:
    """A librdkafka properties file (``kcat -F``) that logs in as ``auth``'s principal."""
    lines = [f"bootstrap.servers={bootstrap}", *(f"{k}={v}" for k, v in librdkafka(auth).items())]
    return "\n".join(lines) + "\n"


def client_env(bootstrap: str, auth: KafkaAuth) -> str:
    """The same login as CHORUS_KAFKA_* lines (for `set -a; . file`): the chorus CLI as
    that principal, e.g. an operator's produce, rather than as the admin."""
    values = {
        "CHORUS_KAFKA_BOOTSTRAP": bootstrap,
        "CHORUS_KAFKA_SECURITY_PROTOCOL": auth.security_protocol,
        "CHORUS_KAFKA_SASL_MECHANISM": auth.sasl_mechanism,
        "CHORUS_KAFKA_SASL_USERNAME": auth.sasl_username,
        "CHORUS_KAFKA_SASL_PASSWORD": auth.sasl_password.get_secret_value(),
        "CHORUS_KAFKA_SSL_CAFILE": auth.ssl_cafile,
    }
    return "".join(f"{name}={value}\n" for name, value in values.items())


def librdkafka(auth: KafkaAuth) -> dict[str, str]:
    """The same login as librdkafka properties (confluent-kafka, kcat's ``-F`` file)."""
    options = {"security.protocol": auth.security_protocol.lower()}
    if auth.uses_tls and auth.ssl_cafile:
        options["ssl.ca.location"] = auth.ssl_cafile
    if auth.uses_sasl:
        options |= {
            "sasl.mechanism": auth.sasl_mechanism,
            "sasl.username": auth.sasl_username,
            "sasl.password": auth.sasl_password.get_secret_value(),
        }
    return options
