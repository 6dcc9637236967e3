"""What the soak measures over time: one :class:`Sample` every ``every_s``.

Every process's RSS and open file descriptors from /proc (the services, the sandbox, the
brokers, PostgreSQL's postmaster and the sum of its backends), consumer lag and outbox
backlog, the database's table and index sizes, each consumer group's members, and the
workflows started and settled so far. Latency percentiles come from the driver's
record of each workflow (submitted -> seen settled), per window, in the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from chorus.kernel.kafka import KafkaAuth
from chorus.tools.access import librdkafka
from tests.reliability.deployment import Deployment
from tests.reliability.observe import group_lag
from tests.reliability.reconciler import outbox_backlog

log = logging.getLogger("soak.sampler")


@dataclass
class Sample:
    t_s: float
    """Seconds since the load began."""
    started: int
    settled: int
    rss_mib: dict[str, float] = field(default_factory=dict)
    fds: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    """Which process each reading is of: a new pid is a restart (slopes are fitted per run)."""
    lag: dict[str, int] = field(default_factory=dict)
    outbox: dict[str, int] = field(default_factory=dict)
    table_mib: float = 0.0
    index_mib: float = 0.0
    tables: dict[str, float] = field(default_factory=dict)
    """schema -> its tables and indexes, MiB."""
    group_members: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def proc_usage(pid: int) -> tuple[float, int] | None:
    """RSS (MiB) and open file descriptors of ``pid``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        return rss_kib / 1024, len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, StopIteration, PermissionError):
        return None


def postgres_pids(data_dir: Path) -> tuple[int | None, list[int]]:
    """The postmaster (first line of postmaster.pid) and its children (the backends)."""
    try:
        postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None, []
    children: list[int] = []
    try:
        with open(f"/proc/{postmaster}/task/{postmaster}/children") as f:
            children = [int(p) for p in f.read().split()]
    except FileNotFoundError:
        pass
    return postmaster, children


@dataclass
class Sampler:
    dep: Deployment
    started_at: float
    postgres_data: Path | None
    samples: list[Sample] = field(default_factory=list)

    def processes(self) -> dict[str, int]:
        """name -> pid of every process to watch now."""
        out: dict[str, int] = {}
        for name, proc in self.dep.stack.procs.items():
            if proc.popen is not None and proc.running:
                out[name] = proc.popen.pid
        kafka = self.dep.config.kafka
        for n in range(1, kafka.nodes + 1):
            with contextlib.suppress(FileNotFoundError, ValueError):
                out[f"kafka-{n}"] = int((kafka.node_dir(n) / "kafka.pid").read_text().strip())
        return out

    async def sample(self) -> Sample:
        workflows = self.dep.driver.of("soak")  # not the capacity measurement's
        s = Sample(
            t_s=time.monotonic() - self.started_at,
            started=len(workflows),
            settled=sum(1 for w in workflows if w.settled),
        )
        for name, pid in self.processes().items():
            usage = proc_usage(pid)
            if usage is not None:
                s.rss_mib[name], s.fds[name] = usage
                s.pids[name] = pid
        if self.postgres_data is not None:
            postmaster, backends = postgres_pids(self.postgres_data)
            if postmaster is not None and (usage := proc_usage(postmaster)) is not None:
                s.rss_mib["postgres"], s.fds["postgres"] = usage
                s.pids["postgres"] = postmaster
                # Backends share the postmaster's memory: their sum overstates it, but its
                # trend is what a leak in a session (a prepared-statement cache) shows.
                summed = [u for u in map(proc_usage, backends) if u is not None]
                s.rss_mib["postgres-backends"] = sum(u[0] for u in summed)
                s.fds["postgres-backends"] = sum(u[1] for u in summed)
                s.pids["postgres-backends"] = postmaster
        for what, read in (
            ("lag", self._lag),
            ("outbox", self._outbox),
            ("sizes", self._sizes),
            ("groups", self._groups),
        ):
            try:
                await asyncio.wait_for(read(s), 20)
            except Exception as exc:  # a reading taken while the broker or database is down
                s.errors.append(f"{what}: {exc!r}"[:200])
        self.samples.append(s)
        return s

    async def _lag(self, s: Sample) -> None:
        s.lag = await group_lag(self.dep)

    async def _outbox(self, s: Sample) -> None:
        s.outbox = await outbox_backlog(self.dep.pool)

    async def _sizes(self, s: Sample) -> None:
        async with self.dep.pool.acquire() as conn:
            rows = await conn.fetch(
                """SELECT n.nspname AS schema,
                          sum(pg_table_size(c.oid)) AS tables,
                          sum(pg_indexes_size(c.oid)) AS indexes
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE c.relkind = 'r'
                     AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
                   GROUP BY n.nspname"""
            )
        mib = 1024 * 1024
        s.table_mib = sum(int(r["tables"]) for r in rows) / mib
        s.index_mib = sum(int(r["indexes"]) for r in rows) / mib
        s.tables = {r["schema"]: (int(r["tables"]) + int(r["indexes"])) / mib for r in rows}

    async def _groups(self, s: Sample) -> None:
        # confluent-kafka's admin: aiokafka's DescribeGroups response fails to decode
        # against Kafka 4 ("Buffer underrun decoding string").
        groups = {self.dep.group(name): name for name in self.dep.stack.services}
        admin = AdminClient({"bootstrap.servers": self.dep.bootstrap, **librdkafka(KafkaAuth())})
        futures = admin.describe_consumer_groups(list(groups), request_timeout=15)
        for group, future in futures.items():
            described = await asyncio.to_thread(future.result, 20)
            s.group_members[groups[group]] = len(described.members)
