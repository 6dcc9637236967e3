"""One isolated Chorus deployment: its own topics, database, clock and processes.

Topics come from a copy of the registry renamed with a unique suffix (as every
integration test does); the database is a fresh one on the server, so every service
schema (inboxes, timers, dead letters, the audit projection, budgets) holds this
deployment's rows alone and the reconciler can count them exactly. Services run as
separate OS processes through :class:`chorus.tools.devstack.DevStack`; extra replicas of a
service are clones of its process with their own HTTP port and instance name, in the
same consumer group.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx

from chorus.base.clock import OffsetFileClock
from chorus.contracts.registry import Registry, load_registry
from chorus.kernel.kafka import make_admin
from chorus.kernel.service import ServiceSpec
from chorus.tools import devstack
from chorus.tools.declarations import service_module
from chorus.tools.devstack import REFERENCE_PROJECT, DevStack, Proc, free_port, project_services
from chorus.tools.topics import apply_topics, read_topics
from tests.reliability.driver import Driver
from tests.reliability.infra import KafkaCluster, PostgresServer, broker_netns
from tests.reliability.netlab import NetLab, Node
from tests.support.registry import ensure_service_users, grant_access, isolated_schemas

log = logging.getLogger("reliability.deployment")

CONTROL_EVENT = "retry.due"
DEAD_LETTER_CONSUMERS = ("deadletter_service", "audit_projector")
"""Services that read ``chorus.deadletters``: a dead letter carries the record it wraps
(base64) plus a traceback, so they must accept more than the services that produce them
(the dead-letter service's own default is 8 MiB for this reason)."""
BIG_EVENT_BYTES = 8 * 1_048_576
LARGE_ORDER = {
    "po_number": "PO-7781",  # what the driver's invoices name (tests.support.submissions)
    "vendor_id": "vendor-acme",
    "currency": "EUR",
    "total_cents": 10**12,
    "cost_center": "cc-research",
}
STARTUP_ATTEMPTS = 5
DATABASE_PROXY = "database"


@dataclass(frozen=True)
class DeploymentConfig:
    name: str
    kafka: KafkaCluster
    postgres: PostgresServer
    max_event_bytes: int | None = 65_536
    """CHORUS_MAX_EVENT_BYTES of the services that are not dead-letter consumers, small
    enough that an "oversize" poison record still fits the broker (whose limit is about
    1 MB). None keeps every service's production default."""
    session_timeout_ms: int = 6_000
    """The broker's minimum: a SIGKILLed member leaves the group after this long."""
    isolated: tuple[str, ...] = ()
    """Services each run in a network namespace of its own (:mod:`tests.reliability.netlab`),
    which a scenario can partition from the broker or the database while they run."""
    database_proxy: bool = False
    """Every service reaches the database through a toxiproxy (latency, resets)."""

    @property
    def netlab(self) -> bool:
        return bool(self.isolated) or self.database_proxy or self.kafka.isolated

    def describe(self) -> str:
        kafka = self.kafka
        insync = kafka.min_insync_replicas
        limits = (
            f"max event bytes {self.max_event_bytes} (dead-letter consumers {BIG_EVENT_BYTES})"
            if self.max_event_bytes is not None
            else "production default size limits"
        )
        network = ""
        if self.isolated:
            network += f"; in network namespaces of their own: {', '.join(self.isolated)}"
        if self.database_proxy:
            network += "; the database through toxiproxy"
        return (
            f"Kafka {kafka.label} at {kafka.bootstrap}, replication factor {kafka.replication_factor}, "
            f"min.insync.replicas {insync}, producers acks=all; PostgreSQL {self.postgres.label}; {limits}"
            f"{network}"
        )


@dataclass
class Fault:
    """One injected fault, with when it started and when the system was whole again."""

    kind: str
    target: str
    detail: str
    started_at: float
    healed_at: float | None = None
    count: int = 1
    """How many faults this entry stands for (e.g. copies of re-injected records)."""


@dataclass
class FaultLog:
    faults: list[Fault] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Faults that could not be injected as asked (an injection point never reached):
    a scenario that did not break anything must not pass."""
    notes: list[str] = field(default_factory=list)
    """What the scenario measured besides (in its result's notes)."""

    def add(self, kind: str, target: str, detail: str, *, count: int = 1) -> Fault:
        fault = Fault(kind, target, detail, time.monotonic(), count=count)
        self.faults.append(fault)
        return fault

    @property
    def total(self) -> int:
        return sum(f.count for f in self.faults)

    @property
    def healed_at(self) -> float | None:
        times = [f.healed_at or f.started_at for f in self.faults]
        return max(times) if times else None

    def by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for fault in self.faults:
            counts[fault.kind] = counts.get(fault.kind, 0) + fault.count
        return counts


@dataclass(frozen=True)
class Poison:
    """A record that is not a valid event, where it landed, and its exact bytes."""

    kind: str
    topic: str
    partition: int
    offset: int
    value: bytes


PROJECT_SCHEMAS = REFERENCE_PROJECT / "schemas"
"""The deployment runs the support project (the third reference workflow) beside the
platform, as `make services` does: its registry is the union of the two."""
if str(REFERENCE_PROJECT / "services") not in sys.path:  # its services' specs, as the platform's
    sys.path.append(str(REFERENCE_PROJECT / "services"))
SERVICES: tuple[str, ...] = (*devstack.SERVICES, *project_services(REFERENCE_PROJECT))
"""Every service a deployment runs: the platform's and the project's."""


def service_spec(name: str) -> ServiceSpec[Any, Any]:
    spec: ServiceSpec[Any, Any] = importlib.import_module(f"{service_module(name)}.service").SPEC
    return spec


def subscriptions(registry: Registry, services: tuple[str, ...] = SERVICES) -> dict[str, set[str]]:
    """Physical topics each service's consumer group reads (as ``ServiceRunner.topics``)."""
    out: dict[str, set[str]] = {}
    for name in services:
        topics: set[str] = set()
        for event_type in service_spec(name).consumes():
            topics.update(registry.topic_for(event_type).physical_topics())
        topics.update(registry.topic_for(CONTROL_EVENT).physical_topics())
        out[name] = topics
    return out


class Deployment:
    def __init__(self, config: DeploymentConfig, results_dir: Path) -> None:
        self.config = config
        self.workdir = results_dir / config.name
        self.suffix = uuid.uuid4().hex[:10]
        self.database = f"chorus_rel_{self.suffix}"
        self.clock_file = self.workdir / "clock-offset"
        self._registry: Registry | None = None
        self._stack: DevStack | None = None
        self._driver: Driver | None = None
        self._pool: asyncpg.Pool | None = None
        self.database_url = ""
        self.replicas: dict[str, list[str]] = {}
        self.stopped_on_purpose: set[str] = set()
        """Processes a scenario stopped and restarts itself (not an unexpected exit)."""
        self.unexpected_exits: list[str] = []
        self.startup_crashes: list[str] = []
        self.topology = ""
        self.poison: list[Poison] = []
        """Every poison record published into this deployment (the dead-letter check is
        over all of them: the store is the deployment's)."""
        self.lab: NetLab | None = None
        self.nodes: dict[str, Node] = {}
        """service -> the network namespace it runs in (``config.isolated``)."""

    # -- parts -------------------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        assert self._registry is not None, "deployment not started"
        return self._registry

    @property
    def stack(self) -> DevStack:
        assert self._stack is not None, "deployment not started"
        return self._stack

    @property
    def driver(self) -> Driver:
        assert self._driver is not None, "deployment not started"
        return self._driver

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "deployment not started"
        return self._pool

    @property
    def bootstrap(self) -> str:
        return self.config.kafka.bootstrap

    def group(self, service: str) -> str:
        """The consumer group of ``service`` (all its replicas) in this deployment."""
        return f"{service}.{self.suffix}"

    def physical(self, event_type: str) -> str:
        """The normal-lane physical topic of ``event_type`` in this deployment."""
        return self.registry.physical_topic(event_type)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The registry's own partition counts: rebalances and zombies need several.
        root = isolated_schemas(
            self.workdir, self.suffix, with_test_topic=False, partitions=None, root=PROJECT_SCHEMAS
        )
        self._registry = load_registry(root)
        kafka = self.config.kafka
        # As `chorus topics apply` does (retention, cleanup, max.message.bytes per topic).
        await apply_topics(
            kafka.bootstrap, list(self.registry.topics.values()), replication_factor=kafka.replication_factor
        )
        # Its services log in as their own principals, which this registry's ACLs bind.
        await ensure_service_users(kafka.bootstrap, PROJECT_SCHEMAS)
        await grant_access(self.registry, kafka.bootstrap)
        self.topology = await self._check_topics()
        self.database_url = await self.config.postgres.create_database(self.database)
        services_database = self.database_url
        if self.config.netlab:
            await self.start_lab()
            assert self.lab is not None
            if self.config.database_proxy:
                services_database = await self._database_proxy(self.lab)
        env = {
            "CHORUS_SCHEMAS_DIR": str(self.registry.root),
            "CHORUS_KAFKA_BOOTSTRAP": kafka.bootstrap,
            "CHORUS_DATABASE_URL": services_database,
            "CHORUS_CLOCK": f"offset-file:{self.clock_file}",
            "CHORUS_DB_POOL_SIZE": "5",
            "CHORUS_SESSION_TIMEOUT_MS": str(self.config.session_timeout_ms),
        }
        # Consumer groups are broker-wide: with the default names (the service's) this
        # deployment would share groups, and so rebalances and membership, with every
        # other test and benchmark on the shared broker.
        service_env: dict[str, dict[str, str]] = {
            name: {"CHORUS_GROUP_ID": self.group(name)} for name in SERVICES
        }
        # Budgets large enough for every invoice a run submits (the defaults hold ~40).
        service_env["budget_agent"]["CHORUS_BUDGETS"] = json.dumps({"cc-research": 10**12})
        # And a purchase order they may all be invoiced against (the default's holds one).
        service_env["budget_agent"]["CHORUS_PURCHASE_ORDERS"] = json.dumps([LARGE_ORDER])
        # The driver stands for many clients behind one key: polling every open workflow at
        # once is its load, not abuse (the per-key limit has its own test).
        service_env["gateway"].update({"CHORUS_API_RATE_PER_S": "2000", "CHORUS_API_BURST": "4000"})
        # A ticket's reply falls due while its refund waits for the manager, now and then.
        service_env["triage_agent"]["CHORUS_REPLY_WITHIN_S"] = "1"
        if self.config.max_event_bytes is not None:
            env["CHORUS_MAX_EVENT_BYTES"] = str(self.config.max_event_bytes)
            for name in DEAD_LETTER_CONSUMERS:
                service_env.setdefault(name, {})["CHORUS_MAX_EVENT_BYTES"] = str(BIG_EVENT_BYTES)
        stack = DevStack(
            self.workdir / "logs",
            env=env,
            service_env=service_env,
            # Payments take a moment, as real ones do: a crash or a pause can land mid-call.
            sandbox_args=["--flaky-source", "beta", "--payment-delay", "0.3"],
            project=REFERENCE_PROJECT,
        )
        # The LLM is the sandbox's OpenAI-compatible endpoint (as everywhere): the agents'
        # model calls are external calls too (mid_external_call applies to them).
        self._stack = stack
        for name in self.config.isolated:
            self.nodes[name] = await self._isolate(name)
        await stack.provision()
        await asyncio.gather(*(self.start_proc(name) for name in stack.procs))
        await self.stack.wait_api()
        self._driver = Driver(stack.api_url, stack.sandbox_url)
        await self._driver.start()
        self._pool = await asyncpg.create_pool(self.database_url, min_size=1, max_size=6)

    async def start_infrastructure(self) -> None:
        """The private Kafka (fresh: nothing left from earlier runs) and PostgreSQL this
        deployment breaks, when it has them; the shared ones are never touched."""
        kafka, postgres = self.config.kafka, self.config.postgres
        if kafka.name is not None:
            await kafka.reset()
            if kafka.isolated:
                await self.start_lab()  # its brokers start in the lab's namespaces
            await kafka.start()
        if postgres.private_dir is not None:
            await postgres.start()

    async def stop_infrastructure(self) -> None:
        try:
            if self.config.kafka.name is not None:
                await self.config.kafka.stop()
        finally:
            if self.config.postgres.private_dir is not None:
                await self.config.postgres.stop()

    async def start_lab(self) -> None:
        """The network lab, with a namespace per broker of an isolated cluster: before the
        brokers start (they start in them). A no-op once started."""
        if self.lab is not None:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.lab = NetLab(self.workdir / "netlab")
        await self.lab.start()
        kafka = self.config.kafka
        if kafka.isolated:
            for n in range(1, kafka.nodes + 1):
                # The client and controller ports (kafka.sh: base + 2(n-1), + 1).
                node = await self.lab.node(f"kafka{n}", [kafka.port(n), kafka.port(n) + 1])
                assert node.netns == broker_netns(n)

    def broker_node(self, n: int) -> Node:
        assert self.lab is not None
        return self.lab.nodes[f"kafka{n}"]

    async def _database_proxy(self, lab: NetLab) -> str:
        """The services' database URL, through a toxiproxy in front of the server."""
        assert lab.toxiproxy is not None
        parts = urlsplit(self.database_url)
        port = await lab.toxiproxy.proxy(DATABASE_PROXY, f"{parts.hostname}:{parts.port}")
        return parts._replace(netloc=f"{parts.netloc.rsplit(':', 1)[0]}:{port}").geturl()

    async def _isolate(self, name: str) -> Node:
        """Put ``name``'s process in a namespace of its own (before it starts): everything it
        reaches at 127.0.0.1 crosses the node's veth pair, and so do the host's calls to its
        health and API ports."""
        assert self.lab is not None
        proc = self.proc(name)
        own = {int(urlsplit(proc.health_url).port or 0)} if proc.health_url else set()
        if "CHORUS_API_PORT" in proc.env:
            own.add(int(proc.env["CHORUS_API_PORT"]))
        node = await self.lab.node(name, own)
        proc.argv = node.wrap(proc.argv)
        return node

    def node(self, name: str) -> Node:
        if name not in self.nodes:
            raise KeyError(f"{name} does not run in a network namespace of its own in {self.config.name}")
        return self.nodes[name]

    def kafka_ports(self) -> list[int]:
        kafka = self.config.kafka
        if kafka.external:
            return [int(address.rsplit(":", 1)[1]) for address in kafka.bootstrap.split(",")]
        return [kafka.port(n) for n in range(1, kafka.nodes + 1)]

    def database_port(self) -> int:
        """The port the services reach the database on (the proxy's, when there is one)."""
        lab = self.lab
        if lab is not None and lab.toxiproxy is not None and DATABASE_PROXY in lab.toxiproxy.proxies:
            return lab.toxiproxy.proxies[DATABASE_PROXY]
        return int(urlsplit(self.database_url).port or 5432)

    async def _check_topics(self) -> str:
        """Read back what the broker made of the topics: the durability a scenario claims
        (replication, min.insync.replicas) must be what it gets."""
        names = [p for spec in self.registry.topics.values() for p in spec.physical_topics()]
        kafka = self.config.kafka
        # Each broker learns of new topics from the controller in its own time: on a
        # fresh 3-broker cluster the one asked may not list them yet. Ask again until the
        # brokers agree or the deadline passes; only then is a mismatch real.
        deadline = time.monotonic() + 30.0
        while True:
            admin = make_admin(self.bootstrap)
            await admin.start()
            try:
                actual = await read_topics(admin, names)
            finally:
                await admin.close()
            factors = {t.replication_factor for t in actual.values()}
            insync = {t.configs.get("min.insync.replicas", "?") for t in actual.values()}
            if (
                len(actual) == len(names)
                and factors == {kafka.replication_factor}
                and insync == {str(kafka.min_insync_replicas)}
            ):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"topics are not as the deployment needs after 30s: {len(actual)}/{len(names)} "
                    f"exist, replication {sorted(factors)}, min.insync.replicas {sorted(insync)}"
                )
            await asyncio.sleep(0.5)
        partitions = sum(t.partitions for t in actual.values())
        return (
            f"{len(actual)} topics, {partitions} partitions, replication factor {kafka.replication_factor}, "
            f"min.insync.replicas {kafka.min_insync_replicas}"
        )

    async def stop(self, *, clean: bool) -> None:
        """Stop every process; ``clean`` (a run that passed) also drops the database and
        deletes the topics. A failed run keeps both for the post-mortem."""
        if self._driver is not None:
            await self._driver.close()
        if self._pool is not None:
            await self._pool.close()
        if self._stack is not None:
            await self._stack.stop()
        try:
            if not clean:
                return
            if self.database_url:
                await self.config.postgres.drop_database(self.database)
            if self._registry is not None:
                await self.delete_topics()
        finally:
            if self.lab is not None:  # last: the brokers may live in it
                await self.lab.stop()

    async def delete_topics(self) -> None:
        """Each partition holds a file descriptor on the broker, which dies when a few
        hundred deployments' worth of topics pile up: leave none behind."""
        admin = make_admin(self.bootstrap)
        await admin.start()
        try:
            await admin.delete_topics(
                [p for spec in self.registry.topics.values() for p in spec.physical_topics()]
            )
        finally:
            await admin.close()

    # -- processes ------------------------------------------------------------------------------

    def proc(self, name: str) -> Proc:
        return self.stack.procs[name]

    async def terminate(self, name: str, timeout_s: float = 40.0) -> int:
        """SIGTERM (graceful: in-flight records finish, offsets commit, the group is left)."""
        proc = self.proc(name)
        self.stopped_on_purpose.add(name)
        if proc.popen is None or not proc.running:
            return proc.popen.returncode if proc.popen else 0
        proc.popen.send_signal(signal.SIGCONT)  # a paused process cannot handle SIGTERM
        proc.popen.send_signal(signal.SIGTERM)
        try:
            return await self.stack.wait_exit(name, timeout_s)
        except RuntimeError:
            self.stack.kill(name)
            raise

    async def start_proc(
        self, name: str, extra_env: dict[str, str] | None = None, *, healthy: bool = True
    ) -> None:
        """Start a process and wait until it is healthy, restarting it when it dies while
        starting, as a supervisor (Kubernetes' restartPolicy) would. Each such crash is
        recorded in ``startup_crashes`` (the report lists them; they are a finding of
        their own, not a fault of the scenario's)."""
        for attempt in range(1, STARTUP_ATTEMPTS + 1):
            self.proc(name).start(extra_env)
            if not healthy:
                break
            try:
                await self.stack.wait_healthy(name, timeout_s=120)
                break
            except RuntimeError:
                if self.proc(name).running or attempt == STARTUP_ATTEMPTS:
                    raise  # not a crash at start: it hangs
                popen = self.proc(name).popen
                code = popen.returncode if popen is not None else None
                if '"msg": "service started"' in self.log_since_start(name):
                    # It was up (before /health answered) and then stopped: a fatal error
                    # while running, which the scenario must answer for.
                    self.unexpected_exits.append(f"{name} (exit {code}): {self.last_error(name)}")
                else:
                    self.startup_crashes.append(f"{name}: {self.last_error(name)}")
                log.warning(
                    "%s died while starting (attempt %d, exit %s); restarting it", name, attempt, code
                )
                await asyncio.sleep(0.5 * attempt)
        self.stopped_on_purpose.discard(name)

    def last_error(self, name: str) -> str:
        """What the current run's log says last about an error (a critical log line's
        message, or a traceback's last line)."""
        lines = self.log_since_start(name).splitlines()
        for line in reversed(lines):
            if '"level": "critical"' in line:
                try:
                    return str(json.loads(line).get("msg", line))[:300]
                except ValueError:
                    return line[:300]
        for line in reversed(lines):
            if line.startswith(("Traceback", " ")) or not ("Error" in line or "Exception" in line):
                continue
            return line.strip()[:300]
        return "(no error in its log)"

    def log_since_start(self, name: str) -> str:
        """The log of the process's current run (after its last start marker)."""
        proc = self.proc(name)
        text = proc.log_path.read_text(errors="replace") if proc.log_path.exists() else ""
        marker = f"--- start #{proc.starts} ---"
        return text.rsplit(marker, 1)[-1]

    async def health(self, name: str) -> dict[str, Any]:
        url = self.proc(name).health_url
        assert url is not None
        async with httpx.AsyncClient(timeout=3.0) as client:
            body: dict[str, Any] = (await client.get(url)).json()
            return body

    async def add_replica(self, service: str) -> str:
        """Another process of ``service`` in the same consumer group; returns its name."""
        base = self.proc(service)
        index = len(self.replicas.get(service, [])) + 2
        name = f"{service}#{index}"
        port = free_port()
        env = {**base.env, "CHORUS_HTTP_PORT": str(port), "CHORUS_INSTANCE": str(index)}
        env.pop("CHORUS_FAULTS", None)
        self.stack.procs[name] = Proc(
            name,
            list(base.argv),
            env,
            self.stack.workdir / f"{service}-{index}.log",
            f"http://127.0.0.1:{port}/health",
        )
        self.replicas.setdefault(service, []).append(name)
        await self.start_proc(name)
        return name

    async def add_release(self, service: str, release: str) -> str:
        """Another release of ``service`` beside it (CHORUS_RELEASE: its own consumer group,
        only the workflows pinned to it), started; returns its process name."""
        name = self.stack.add_release(service, release)
        await self.start_proc(name)
        return name

    async def remove_replica(self, name: str) -> int:
        """Scale down gracefully; returns the exit code (0 after a clean shutdown)."""
        code = await self.terminate(name)
        service = name.split("#", 1)[0]
        self.replicas[service].remove(name)
        del self.stack.procs[name]
        self.stopped_on_purpose.discard(name)
        return code

    async def heal(self) -> list[str]:
        """Restart every process that died without a scenario stopping it (each one is
        recorded in ``unexpected_exits``, which fails the scenario); returns their names."""
        dead = [
            name
            for name, proc in self.stack.procs.items()
            if not proc.running and name not in self.stopped_on_purpose
        ]
        for name in dead:
            popen = self.proc(name).popen
            code = popen.returncode if popen is not None else None
            self.unexpected_exits.append(f"{name} (exit {code}): {self.last_error(name)}")
            log.error("%s exited unexpectedly (%s):\n%s", name, code, self.proc(name).tail(20))
            self.stack.kill(name)
            await self.start_proc(name)
        return dead

    # -- time --------------------------------------------------------------------------------------

    async def advance_clock(self, seconds: float) -> None:
        """Move every process's clock forward (the offset file they all read), and return
        once each has had time to see it: a process re-reads the file at most every 50 ms, so
        a workflow submitted at once could start on the old time in one service and be judged
        on the new one in the next (seen once: a report's sources stage opened 8 h in the
        past, so its fetch was "too late" and the report failed)."""
        OffsetFileClock.advance(self.clock_file, seconds)
        await asyncio.sleep(0.25)
