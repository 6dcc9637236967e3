"""Kafka and PostgreSQL for a deployment, started (and broken) through deploy/local.

The shared local broker (127.0.0.1:9092) and database server serve every other test
and the benchmarks, so the suite never restarts them. Scenarios that restart a broker
or the database get private ones: a named Kafka cluster (``KAFKA_CLUSTER``, its own
ports and data under .local/kafka/<name>/) and a private PostgreSQL cluster
(``CHORUS_LOCAL``/``CHORUS_PG_PORT``, data under .local/reliability-infra/).
"""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from chorus.base.settings import LOCAL_DATABASE_URL
from chorus.kernel.kafka import make_admin
from tests.support.database import create_database, database_url, drop_database

ROOT = Path(__file__).resolve().parents[2]
LOCAL_SCRIPTS = ROOT / "deploy" / "local"
PRIVATE_INFRA = ROOT / ".local" / "reliability-infra"


class InfraError(RuntimeError):
    """A deploy/local script failed; the message carries its output."""


async def run_script(script: str, command: str, env: dict[str, str], timeout_s: float = 300.0) -> str:
    """Run ``deploy/local/<script> <command>``; returns its output, raises with it on failure."""
    proc = await asyncio.create_subprocess_exec(
        str(LOCAL_SCRIPTS / script),
        command,
        env={**os.environ, **env},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise InfraError(f"{script} {command} did not finish within {timeout_s}s") from None
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise InfraError(f"{script} {command} failed (exit {proc.returncode}):\n{text}")
    return text


@dataclass(frozen=True)
class KafkaCluster:
    """A Kafka that deploy/local/kafka.sh runs: the default broker (``name`` None) or a
    named cluster beside it."""

    name: str | None
    nodes: int = 1
    port_base: int = 9092
    external: str | None = None
    """Bootstrap of a broker not started here (CHORUS_KAFKA_BOOTSTRAP); never broken."""
    isolated: bool = False
    """Each broker runs in a network namespace of its own (tests/reliability/netlab.py, which
    must have made them: :func:`broker_netns`), so one can be cut off from the others."""

    @staticmethod
    def shared(bootstrap: str | None = None) -> KafkaCluster:
        """The broker every test shares: the local default one, or CHORUS_KAFKA_BOOTSTRAP's."""
        external = bootstrap or os.environ.get("CHORUS_KAFKA_BOOTSTRAP")
        return KafkaCluster(None, external=external if external != "127.0.0.1:9092" else None)

    @property
    def bootstrap(self) -> str:
        if self.external:
            return self.external
        return ",".join(f"127.0.0.1:{self.port(n)}" for n in range(1, self.nodes + 1))

    @property
    def replication_factor(self) -> int:
        return 3 if self.nodes >= 3 else 1

    @property
    def min_insync_replicas(self) -> int:
        """What deploy/local/kafka.sh configures: with three replicas an acks=all write
        needs two of them, so one broker may die without losing an acknowledged write."""
        return 2 if self.nodes >= 3 else 1

    @property
    def label(self) -> str:
        return f"{self.name or 'local'} ({self.nodes} broker{'s' if self.nodes > 1 else ''})"

    def port(self, node: int) -> int:
        return self.port_base + 2 * (node - 1)

    def env(self) -> dict[str, str]:
        if self.name is None:
            return {}
        netns = {f"KAFKA_NETNS_{n}": broker_netns(n) for n in range(1, self.nodes + 1) if self.isolated}
        return {
            "KAFKA_CLUSTER": self.name,
            "KAFKA_NODES": str(self.nodes),
            "KAFKA_PORT_BASE": str(self.port_base),
            **netns,
        }

    async def leaders(self, topics: list[str]) -> dict[int, int]:
        """Broker -> how many partitions of ``topics`` it leads, as the cluster says now."""
        admin = make_admin(self.bootstrap)
        await admin.start()
        try:
            described = await admin.describe_topics(topics)
        finally:
            await admin.close()
        leads: dict[int, int] = {}
        for topic in described:
            for partition in topic["partitions"]:
                leads[partition["leader"]] = leads.get(partition["leader"], 0) + 1
        return leads

    def node_dir(self, node: int) -> Path:
        base = ROOT / ".local" / "kafka"
        return (base / self.name if self.name else base) / f"node{node}"

    async def start(self) -> None:
        """Start every node that is not running (a no-op for running ones)."""
        if self.external is None:
            await run_script("kafka.sh", "start", self.env())

    async def stop(self) -> None:
        await run_script("kafka.sh", "stop", self.env())

    async def reset(self) -> None:
        """Stop and delete the cluster's data (a named cluster only)."""
        if self.name is None:
            raise InfraError("the shared local broker's data is never deleted here")
        await run_script("kafka.sh", "reset", self.env())

    def kill_node(self, node: int) -> int:
        """SIGKILL one broker (no controlled shutdown); returns its pid."""
        if self.name is None:
            raise InfraError("the shared local broker is never killed; use a named cluster")
        pid = int((self.node_dir(node) / "kafka.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        return pid

    async def wait_node_gone(self, node: int, timeout_s: float = 30.0) -> None:
        pid = int((self.node_dir(node) / "kafka.pid").read_text().strip())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            await asyncio.sleep(0.1)
        raise InfraError(f"kafka node {node} (pid {pid}) still alive after {timeout_s}s")

    async def busiest_node(self, topics: list[str]) -> int:
        """The broker that leads most partitions of ``topics`` (the one whose loss hurts most)."""
        leads = await self.leaders(topics)
        return max(leads, key=lambda n: leads[n]) if leads else 1


def broker_netns(node: int) -> str:
    """The network namespace broker ``node`` of an isolated cluster runs in (the lab's node
    named ``kafka<node>``)."""
    return f"chl-kafka{node}"


@dataclass(frozen=True)
class PostgresServer:
    """A PostgreSQL server; ``private_dir`` set means a private cluster the suite may restart."""

    admin_url: str
    private_dir: Path | None = None
    port: int = 54329

    @staticmethod
    def shared() -> PostgresServer:
        url = os.environ.get("CHORUS_DATABASE_URL", LOCAL_DATABASE_URL)
        return PostgresServer(admin_url=url)

    @staticmethod
    def private(port: int = 54339) -> PostgresServer:
        return PostgresServer(
            admin_url=f"postgresql://chorus:chorus@127.0.0.1:{port}/chorus",
            private_dir=PRIVATE_INFRA,
            port=port,
        )

    @property
    def label(self) -> str:
        return "private" if self.private_dir else "shared"

    def env(self) -> dict[str, str]:
        if self.private_dir is None:
            return {}
        return {
            "CHORUS_LOCAL": str(self.private_dir),
            "CHORUS_PG_PORT": str(self.port),
            "CHORUS_DATABASE_URL": self.admin_url,
        }

    def database_url(self, database: str) -> str:
        return database_url(self.admin_url, database)

    async def start(self) -> None:
        if self.private_dir is not None:
            self.private_dir.mkdir(parents=True, exist_ok=True)
        await run_script("postgres.sh", "start", self.env())

    def _private_only(self, what: str) -> None:
        if self.private_dir is None:
            raise InfraError(f"the shared PostgreSQL is never {what}; use a private server")

    async def restart(self) -> None:
        """pg_ctl restart -m fast: every connection is cut, in-flight transactions roll back."""
        self._private_only("restarted")
        await run_script("postgres.sh", "restart", self.env())

    async def stop(self) -> None:
        self._private_only("stopped")
        await run_script("postgres.sh", "stop", self.env())

    async def create_database(self, name: str) -> str:
        """A fresh database for one deployment; returns its URL. Every service's schema
        (inbox, timers, dead letters, audit projection) starts empty there, so the
        reconciler's counts are this deployment's alone."""
        return await create_database(self.admin_url, name)

    async def drop_database(self, name: str) -> None:
        await drop_database(self.admin_url, name)
