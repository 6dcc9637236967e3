"""What a deployment of Chorus needs from its Kafka and PostgreSQL, checked (``chorus doctor``).

Each check answers one question an operator asks before (or while) running Chorus, and
says what to do when the answer is no:

- the broker: reachable with this login, Kafka 4.0 or newer (what Chorus is tested on: the
  protocol versions Kafka 4 removed are gone), transactions (exactly-once) available, a
  secured listener (SASL over TLS, never PLAINTEXT);
- the authorizer is on, and the registry's principals have exactly the ACLs it implies;
- every topic of the registry exists with its partitions and configs;
- PostgreSQL: its version, and a login role per service that keeps data;
- each key service answers over TLS with a certificate the CA trusts;
- this machine's clock agrees with the database's (timers, deadlines and leases compare
  times written by different machines).

A check never raises: what it could not learn is its answer ("problem", with why).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

import asyncpg
import httpx
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import ApiVersionRequest

from chorus.base.clock import Clock
from chorus.contracts.registry import Registry
from chorus.kernel.kafka import KafkaAuth
from chorus.tools.access import Access
from chorus.tools.cli.migrate import migrating_services
from chorus.tools.topics import TopicOverride, describe_topics, overlaid

MIN_POSTGRES = 14
"""The oldest PostgreSQL Chorus supports (what its migrations and queries use)."""
MAX_SKEW_S = 1.0
"""Timers, deadlines and leases compare times written on different machines: beyond this,
a timer fires early or a lease is taken over while its holder is alive."""
TIMEOUT_S = 10.0

# Protocol versions Kafka 4.0 removed (KIP-896): a broker that still accepts Fetch v0-v3 is
# older than 4.0. InitProducerId is how a transactional (exactly-once) producer starts.
FETCH, INIT_PRODUCER_ID = 1, 22
KAFKA_4_FETCH_MIN = 4


class Status(str, Enum):
    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str

    def as_json(self) -> dict[str, str]:
        return {**asdict(self), "status": self.status.value}


@dataclass(frozen=True)
class Target:
    """What is checked: the deployment as a service of it sees it."""

    registry: Registry
    bootstrap: str
    auth: KafkaAuth
    database_url: str
    key_stores: Mapping[str, str]
    key_service_ca_file: str
    clock: Clock
    topics_overlay: Mapping[str, TopicOverride] = field(default_factory=dict)
    """The deployment's partitions and retention where they are not the registry's."""


async def diagnose(target: Target) -> list[Check]:
    """Every check, in a stable order (a broker check that fails says so once: the checks
    that need the broker then say they could not ask it)."""
    checks: list[Check] = []
    checks += await _guarded("kafka", lambda: kafka_checks(target))
    checks += await _guarded("acls", lambda: acl_checks(target))
    checks += await _guarded("topics", lambda: topic_checks(target))
    checks += await _guarded("postgresql", lambda: postgres_checks(target))
    checks += await _guarded("key service", lambda: key_service_checks(target))
    return checks


async def _guarded(name: str, run: Callable[[], Awaitable[list[Check]]]) -> list[Check]:
    try:
        return await asyncio.wait_for(run(), TIMEOUT_S * 3)
    except (TimeoutError, asyncio.TimeoutError):
        return [Check(name, Status.PROBLEM, f"no answer within {TIMEOUT_S * 3:.0f} s")]
    except Exception as exc:  # an operator's command says what failed, never a traceback
        return [Check(name, Status.PROBLEM, _reason(exc))]


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- Kafka ------------------------------------------------------------------------------------


async def kafka_checks(target: Target) -> list[Check]:
    protocol = target.auth.security_protocol
    secured = (
        Check("kafka security", Status.OK, f"{protocol} ({target.auth.sasl_mechanism})")
        if protocol == "SASL_SSL"
        else Check(
            "kafka security",
            Status.PROBLEM,
            f"{protocol}: credentials and events cross the network unauthenticated or in clear; "
            "Chorus runs on SASL_SSL (CHORUS_KAFKA_SECURITY_PROTOCOL)",
        )
    )
    client = AIOKafkaClient(
        bootstrap_servers=target.bootstrap, request_timeout_ms=int(TIMEOUT_S * 1000), **target.auth.aiokafka()
    )
    try:
        await client.bootstrap()
        node = client.get_random_node()
        answer = await client.send(node, ApiVersionRequest())
        versions = {key: (low, high) for key, low, high in answer.api_versions}
        brokers = len(client.cluster.brokers())
    except Exception as exc:
        return [secured, Check("kafka", Status.PROBLEM, f"cannot reach {target.bootstrap}: {_reason(exc)}")]
    finally:
        await client.close()
    return [secured, *broker_checks(target.bootstrap, versions, brokers)]


def broker_checks(bootstrap: str, versions: Mapping[int, tuple[int, int]], brokers: int) -> list[Check]:
    """What the broker's ApiVersions answer says of it."""
    fetch = versions.get(FETCH)
    if fetch is None:
        return [Check("kafka", Status.PROBLEM, f"{bootstrap} does not accept fetch requests")]
    at_least_4 = fetch[0] >= KAFKA_4_FETCH_MIN
    found = [
        Check(
            "kafka",
            Status.OK if at_least_4 else Status.WARNING,
            f"{bootstrap}: {brokers} broker(s), Kafka 4.0 or newer"
            if at_least_4
            else f"{bootstrap}: {brokers} broker(s), older than Kafka 4.0 (it accepts fetch "
            f"v{fetch[0]}); Chorus is tested on Kafka 4",
        )
    ]
    found.append(
        Check("kafka transactions", Status.OK, "available (exactly-once hand-offs)")
        if INIT_PRODUCER_ID in versions
        else Check(
            "kafka transactions",
            Status.PROBLEM,
            "the broker has no transactions: Chorus hands off exactly once",
        )
    )
    return found


async def acl_checks(target: Target) -> list[Check]:
    def read() -> Check:
        try:
            plan = Access(target.bootstrap, target.auth, timeout_s=TIMEOUT_S).plan(target.registry)
        except RuntimeError as exc:
            text = str(exc)
            if "SECURITY_DISABLED" in text or "No Authorizer" in text:
                return Check(
                    "kafka acls",
                    Status.PROBLEM,
                    "the brokers run without an authorizer: every principal may read and write every topic",
                )
            return Check("kafka acls", Status.PROBLEM, text)
        if plan.add:
            first = ", ".join(f"{g.principal} {g.op.value} {g.resource} {g.name}" for g in plan.add[:3])
            return Check(
                "kafka acls",
                Status.PROBLEM,
                f"{len(plan.add)} ACL(s) the registry implies are missing (e.g. {first}): "
                "chorus access apply",
            )
        if plan.revoke:
            return Check(
                "kafka acls",
                Status.WARNING,
                f"{len(plan.revoke)} ACL(s) of the registry's principals go beyond it: "
                "chorus access apply revokes them",
            )
        return Check("kafka acls", Status.OK, "the registry's principals have exactly the ACLs it implies")

    return [await asyncio.to_thread(read)]


async def topic_checks(target: Target) -> list[Check]:
    specs = overlaid(list(target.registry.topics.values()), target.topics_overlay)
    topics = await describe_topics(target.bootstrap, specs)
    differing = {status.wanted.name: status.differences() for status in topics if status.differences()}
    if not differing:
        return [Check("topics", Status.OK, f"{len(topics)} topic(s) as the registry declares them")]
    shown = "; ".join(f"{name}: {', '.join(found)}" for name, found in sorted(differing.items())[:3])
    more = f" (and {len(differing) - 3} more)" if len(differing) > 3 else ""
    return [
        Check(
            "topics",
            Status.PROBLEM,
            f"{len(differing)} of {len(topics)} topic(s) differ from the registry: {shown}{more}: "
            "chorus topics apply",
        )
    ]


# -- PostgreSQL -------------------------------------------------------------------------------


async def postgres_checks(target: Target) -> list[Check]:
    try:
        conn = await asyncpg.connect(target.database_url, timeout=TIMEOUT_S)
    except Exception as exc:
        return [Check("postgresql", Status.PROBLEM, f"cannot connect: {_reason(exc)}")]
    try:
        version = await conn.fetchval("SELECT current_setting('server_version_num')::int")
        roles = {r["rolname"] for r in await conn.fetch("SELECT rolname FROM pg_roles WHERE rolcanlogin")}
        skew = await _skew(conn, target.clock)
    finally:
        await conn.close()
    return [
        postgres_version_check(version),
        role_check(migrating_services(target.registry), roles),
        skew_check(skew),
    ]


def postgres_version_check(version_num: int) -> Check:
    major = version_num // 10000
    if major < MIN_POSTGRES:
        return Check(
            "postgresql", Status.PROBLEM, f"PostgreSQL {major}: Chorus needs {MIN_POSTGRES} or newer"
        )
    return Check("postgresql", Status.OK, f"PostgreSQL {major}")


def role_check(services: Sequence[str], roles: set[str]) -> Check:
    missing = sorted(set(services) - roles)
    if missing:
        return Check(
            "postgresql roles",
            Status.PROBLEM,
            f"no login role for {', '.join(missing)}: each service keeps its tables under its own role "
            "(chorus access database)",
        )
    return Check(
        "postgresql roles", Status.OK, f"a login role for each of the {len(services)} services with tables"
    )


async def _skew(conn: asyncpg.Connection, clock: Clock) -> float:
    """The database's clock minus this machine's, in seconds, read halfway through the
    round trip (so the network's delay is not counted as skew)."""
    before = time.monotonic()
    local = clock.now()
    theirs: datetime = await conn.fetchval("SELECT clock_timestamp()")
    half_trip = (time.monotonic() - before) / 2
    return (theirs - local).total_seconds() - half_trip


def skew_check(skew_s: float) -> Check:
    detail = (
        f"this machine's clock is {abs(skew_s):.3f} s {'behind' if skew_s > 0 else 'ahead of'} the database's"
    )
    if abs(skew_s) > MAX_SKEW_S:
        return Check("clock", Status.PROBLEM, f"{detail} (at most {MAX_SKEW_S:.0f} s): synchronise it (NTP)")
    return Check("clock", Status.OK, detail)


# -- the key service --------------------------------------------------------------------------


async def key_service_checks(target: Target) -> list[Check]:
    if not any(target.registry.handles_personal(s) for s in target.registry.principals.services):
        return [Check("key service", Status.OK, "not needed: no event of the registry holds personal data")]
    try:
        trust: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=target.key_service_ca_file)
            if target.key_service_ca_file
            else True
        )
    except (OSError, ssl.SSLError) as exc:
        return [Check("key service", Status.PROBLEM, f"CHORUS_KEY_SERVICE_CA_FILE: {_reason(exc)}")]
    checks = []
    async with httpx.AsyncClient(verify=trust, timeout=TIMEOUT_S) as client:
        for region, url in sorted(target.key_stores.items()):
            name = f"key service ({region})"
            try:
                answer = await client.get(f"{url.rstrip('/')}/health")
            except httpx.HTTPError as exc:
                checks.append(Check(name, Status.PROBLEM, f"{url}: {_reason(exc)}"))
                continue
            checks.append(Check(name, Status.OK, f"{url} answers over TLS (HTTP {answer.status_code})"))
    return checks


def failed(checks: Sequence[Check]) -> bool:
    return any(check.status is Status.PROBLEM for check in checks)


def as_json(checks: Sequence[Check]) -> dict[str, Any]:
    return {"ok": not failed(checks), "checks": [check.as_json() for check in checks]}
