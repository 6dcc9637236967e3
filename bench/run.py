"""``python -m bench.run --mode quick|full``: the benchmark suite of issue 9.

Every ratio compares Chorus with its baseline measured in the same run, on the
same broker and database, in interleaved rounds (A B, B A, A B, ...), because
absolute numbers on a shared 2-core machine mean little. Each variant runs in
its own OS process; /proc gives CPU time and memory. Results go to
.local/bench-results/<timestamp>/ (results.md, results.json, chart.png, logs/).

The last line printed is the summary a script can read::

    R2=<ratio> R3=<ratio> R4_p50_ms=<tax> R4_p99_ms=<tax> R5=<ratio> R5_p50_ms=<ms> R5_p99_ms=<ms>
    R5_closed_per_s=<n> R5_closed_p99_ms=<ms> timer_p99_ms=<ms>
    R5_per_s=<n> R5_sealed_per_s=<n> R5_sealed_p50_ms=<ms> R5_sealed_p99_ms=<ms> R5_sealed_ratio=<ratio>
    signed_hop_ratio=<ratio> R5_vs_restate=<ratio> R5_p50_vs_restate=<ratio> R5_p99_vs_restate=<ratio>
    R5_closed_vs_restate=<ratio>
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
from aiokafka import AIOKafkaProducer

import bench.events as bench_events
from bench import procstat
from bench.hops import breakdown
from bench.kafkaio import EPOCH_NS, EnvelopeFactory, Listener, pad_for, produce_all, run_ns
from bench.procs import ServiceProc, Worker, bench_worker, profiled_worker
from bench.profile import top_frames
from bench.registry import bench_registry, delete_topics, raw_topics
from bench.report import write_reports
from bench.restate.fetch_server import binary as restate_binary
from bench.stats import percentile, ratio, summary
from chorus.base.settings import LOCAL_DATABASE_URL, LOCAL_KAFKA, demo_key_service_credential
from chorus.contracts.approvals import ApprovalContext, ApprovalRequested, EscalationStep
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.platform import FireTarget, TimerSchedule
from chorus.contracts.registry import Registry
from chorus.kernel.kafka import make_producer
from chorus.privacy.crypto import DataKey, HttpKeyStore, Scope, keyed_ref, seal_value, subject_hash
from chorus.privacy.feature import KEY_SERVICE_CA, key_service_trust
from chorus.privacy.signing import Signer, load_keys, make_keys
from chorus.runtime.runner import LOCAL_REGION, ServiceSettings
from chorus.testing.stack import key_service_tls
from tests.support.apis import key_api
from tests.support.processes import ROOT, free_port

T = TypeVar("T")
RESULTS = ROOT / ".local" / "bench-results"
TOOLS_VENV = ROOT / ".local" / "bench-venv"
DBOS_VENV = ROOT / ".local" / "bench-dbos-venv"
RESTATE_VENV = ROOT / ".local" / "bench-restate-venv"
RESTATE_DIR = ROOT / ".local" / "bench-restate"
"""The pinned restate-server (bench/restate/make-venv.sh) and each run's data directory."""
SPY = TOOLS_VENV / "bin" / "py-spy"
BENCH_DB = "chorus_bench"
DBOS_APP_DB = "dbos_bench"
DBOS_SYS_DB = "dbos_bench_sys"
RESTATE_APP_DB = "restate_bench"
CLOSED_IN_FLIGHT = 32  # R5 closed loop: what a client with 32 workers keeps running
RUN_LOCK = 0x43484F52  # one bench run at a time: the databases above are per machine


@dataclass(frozen=True)
class Sizes:
    rounds: int
    hop_messages: int
    """Messages per throughput trial (R1-R3)."""
    inflight_messages: int
    """R4: messages sent one at a time per trial."""
    load_seconds: float
    """R4: length of one open-loop trial at 50% of max."""
    flow_workflows: int
    """R5: workflows started at once per throughput trial."""
    flow_latency: int
    """R5: workflows run one after another per latency trial."""
    flow_closed: int
    """R5: workflows per closed-loop trial (32 in flight, each completion starts the next)."""
    timers: int
    timer_spread_s: float
    parked: int
    profile_messages: int


QUICK = Sizes(5, 600, 25, 1.0, 24, 20, 320, 4_000, 2.5, 1_200, 800)
FULL = Sizes(7, 6_000, 200, 4.0, 150, 100, 2_000, 100_000, 50.0, 100_000, 6_000)


def db_url(base: str, name: str) -> str:
    return base.rsplit("/", 1)[0] + "/" + name


@dataclass
class Bench:
    mode: str
    sizes: Sizes
    bootstrap: str
    admin_url: str
    out: Path
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    registry: Registry | None = None
    producer: AIOKafkaProducer | None = None
    admin: asyncpg.Connection | None = None
    seq: int = 0
    broker_pids: list[int] = field(default_factory=list)
    ab_tree: Path | None = None
    """Another checkout to compare with (the ab section)."""
    results: dict[str, Any] = field(default_factory=dict)
    cleanup: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    @property
    def logs(self) -> Path:
        return self.out / "logs"

    @property
    def bench_url(self) -> str:
        return db_url(self.admin_url, BENCH_DB)

    def reg(self) -> Registry:
        assert self.registry is not None
        return self.registry

    def prod(self) -> AIOKafkaProducer:
        assert self.producer is not None
        return self.producer

    def pg(self) -> asyncpg.Connection:
        assert self.admin is not None
        return self.admin

    def next_seqs(self, n: int) -> range:
        start = self.seq
        self.seq += n
        return range(start, start + n)

    def chorus_env(self) -> dict[str, str]:
        return {
            "CHORUS_SCHEMAS_DIR": str(self.reg().root),
            "CHORUS_KAFKA_BOOTSTRAP": self.bootstrap,
            "CHORUS_DATABASE_URL": self.bench_url,
            "CHORUS_LOG_LEVEL": "WARNING",
            "CHORUS_HTTP_PORT": "0",
        }

    async def started(self, worker: Worker) -> Worker:
        self.cleanup.append(worker.stop)
        await worker.start()
        return worker

    def log(self, message: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- measuring a window --------------------------------------------------------------------


@dataclass
class Usage:
    wall_s: float
    service_cpu_s: float
    broker_cpu_s: float
    postgres_cpu_s: float
    machine_busy_s: float


class Meter:
    """CPU of the measured processes, the broker and our PostgreSQL backends over a window."""

    def __init__(self, b: Bench, service_pids: list[int], databases: list[str]) -> None:
        self.b = b
        self.service_pids = service_pids
        self.databases = databases

    async def _backends(self) -> list[int]:
        rows = await self.b.pg().fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = ANY($1::text[])", self.databases
        )
        return [r["pid"] for r in rows]

    async def open(self) -> Meter:
        self.t0 = time.perf_counter()
        self.busy0 = procstat.machine_busy_seconds()[0]
        self.svc = procstat.CpuWindow.open(self.service_pids)
        self.broker = procstat.CpuWindow.open(self.b.broker_pids)
        self.pgw = procstat.CpuWindow.open(await self._backends())
        return self

    async def close(self) -> Usage:
        return Usage(
            wall_s=time.perf_counter() - self.t0,
            service_cpu_s=self.svc.close(self.service_pids),
            broker_cpu_s=self.broker.close(self.b.broker_pids),
            postgres_cpu_s=self.pgw.close(await self._backends()),
            machine_busy_s=procstat.machine_busy_seconds()[0] - self.busy0,
        )


# -- R1-R4: one hop --------------------------------------------------------------------------


@dataclass
class HopVariant:
    name: str
    worker: Worker
    in_topic: str
    listener: Listener
    factory: EnvelopeFactory
    pad: str
    signer: Signer | None = None
    """Signs each input as the driver (a signed event type's producer), before the clock starts."""


def hop_listener(b: Bench, topic: str) -> Listener:
    return Listener(
        b.bootstrap,
        topic,
        key_of=lambda body: int(body["payload"]["seq"]),
        sent_of=lambda body: int(body["payload"]["sent_ns"]),
    )


async def hop_throughput(b: Bench, v: HopVariant, n: int) -> dict[str, Any]:
    """Preload n events while the consumer is paused, resume, time until the n-th output."""
    seqs = b.next_seqs(n)
    start = await v.listener.end_offsets()
    messages = [
        (
            f"wf-{b.suffix}-{s}".encode(),
            v.factory.encode(f"wf-{b.suffix}-{s}", {"seq": s, "sent_ns": 0, "pad": v.pad}),
        )
        for s in seqs
    ]
    headers = [[v.signer.header(value)] for _, value in messages] if v.signer else None
    await produce_all(b.prod(), v.in_topic, messages, headers)
    meter = await Meter(b, [v.worker.pid], [BENCH_DB]).open()
    t0 = time.time()
    await v.worker.call("resume")
    await v.listener.wait_count(start, n, timeout_s=60 + n / 50)
    usage = await meter.close()
    # Collected before pausing: n records on the topic may include a republished copy
    # (allowed; consumers drop copies), and then the last inputs are still being handled.
    seen = await v.listener.collect(start, set(seqs), timeout_s=120)
    await v.worker.call("pause")
    last = max(s.ts_ms for s in seen.values()) / 1000
    return {"per_s": n / (last - t0), "usage": asdict(usage)}


async def hop_inflight(b: Bench, v: HopVariant, n: int) -> list[float]:
    """One event in flight: send, wait for its output, repeat. Latencies in ms."""
    v.listener.live()
    latencies = []
    try:
        for s in b.next_seqs(n):
            wf = f"wf-{b.suffix}-{s}"
            waiter = v.listener.expect(s)
            sent = run_ns()
            value = v.factory.encode(wf, {"seq": s, "sent_ns": sent, "pad": v.pad})
            await b.prod().send(v.in_topic, value, key=wf.encode())
            seen = await asyncio.wait_for(waiter, 30)
            latencies.append((seen.recv_ns - sent) / 1e6)
    finally:
        v.listener.pause()
    return latencies


async def hop_open_loop(b: Bench, v: HopVariant, rate: float, seconds: float) -> list[float]:
    """Events sent at a fixed rate (open loop); the first 10% are warm-up. Latencies in ms."""
    n = max(20, int(rate * seconds))
    seqs = list(b.next_seqs(n))
    loop = asyncio.get_running_loop()
    v.listener.live()
    try:
        t0 = loop.time()
        sent = 0
        while sent < n:
            due = min(n, int((loop.time() - t0) * rate) + 1)
            while sent < due:
                s = seqs[sent]
                wf = f"wf-{b.suffix}-{s}"
                value = v.factory.encode(wf, {"seq": s, "sent_ns": run_ns(), "pad": v.pad})
                await b.prod().send(v.in_topic, value, key=wf.encode())
                sent += 1
            await asyncio.sleep(0.002)
        deadline = loop.time() + 60
        while any(s not in v.listener.seen for s in seqs):
            if loop.time() > deadline:
                missing = sum(s not in v.listener.seen for s in seqs)
                raise RuntimeError(f"{v.name}: {missing} of {n} events never came out")
            await asyncio.sleep(0.01)
    finally:
        v.listener.pause()
    measured = seqs[n // 10 :]
    return [(v.listener.seen[s].recv_ns - v.listener.seen[s].sent_ns) / 1e6 for s in measured]


async def handle_buckets(worker: Worker) -> dict[float, float]:
    """Cumulative buckets of the runtime's chorus_handle_seconds (read -> outcome committed)."""
    port = worker.hello.get("http_port")
    if not port:
        return {}
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("chorus_handle_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return buckets


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Upper bound (ms) of the histogram bucket holding quantile q of the window's records."""
    diff = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = diff[-1][1] if diff else 0.0
    if total <= 0:
        raise RuntimeError("the service reported no handled records in the window")
    for le, cumulative in diff:
        if cumulative >= q * total:
            return le * 1000
    return float("inf")


def pct(latencies: list[float]) -> dict[str, float]:
    return {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99), "n": len(latencies)}


async def interleaved(
    rounds: int, variants: list[T], trial: Callable[[T], Awaitable[Any]]
) -> list[dict[int, Any]]:
    """Run ``trial`` on every variant per round, alternating the order (A B, B A, ...)."""
    out = []
    for r in range(rounds):
        order = list(range(len(variants)))
        if r % 2:
            order.reverse()
        results = {}
        for i in order:
            results[i] = await trial(variants[i])
        out.append(results)
    return out


async def make_hop_variants(
    b: Bench, raw_name: str, raw_db: bool, chorus_service: str
) -> tuple[HopVariant, HopVariant]:
    reg = b.reg()
    ping = {"noop": bench_events.NoopPing, "durable": bench_events.DurablePing}[chorus_service]
    pong_type = {"noop": "bench.noop_pong", "durable": "bench.durable_pong"}[chorus_service]
    raw = await raw_topics(b.bootstrap, b.suffix, [f"{raw_name}.in", f"{raw_name}.out"])
    defaults = ServiceSettings()
    raw_cfg: dict[str, Any] = {
        "bootstrap": b.bootstrap,
        "in_topic": raw[f"{raw_name}.in"],
        "out_topic": raw[f"{raw_name}.out"],
        "group": f"{raw_name}-{b.suffix}",
        "database_url": b.bench_url if raw_db else "",
        "concurrency": defaults.concurrency,
        "pool_size": defaults.db_pool_size,
    }
    raw_worker = bench_worker(raw_name, "raw", {"BENCH_WORKER": json.dumps(raw_cfg)}, b.logs)
    chorus_worker = bench_worker(
        f"chorus-{chorus_service}", f"chorus-{chorus_service}", b.chorus_env(), b.logs
    )
    await asyncio.gather(b.started(raw_worker), b.started(chorus_worker))
    await asyncio.gather(raw_worker.call("ready"), chorus_worker.call("ready"))
    factory = EnvelopeFactory(ping(seq=0, sent_ns=0))
    pad = pad_for(factory, {"seq": 10**9, "sent_ns": run_ns()})
    variants = []
    for name, worker, in_topic, out_topic in (
        (raw_name, raw_worker, raw_cfg["in_topic"], raw_cfg["out_topic"]),
        (
            f"chorus-{chorus_service}",
            chorus_worker,
            reg.physical_topic(ping.event_type),
            reg.physical_topic(pong_type),
        ),
    ):
        listener = hop_listener(b, out_topic)
        await listener.start()
        b.cleanup.append(listener.stop)
        variants.append(HopVariant(name, worker, in_topic, listener, factory, pad))
    return variants[0], variants[1]


async def hop_rounds(
    b: Bench, raw_name: str, raw_db: bool, chorus_service: str
) -> tuple[HopVariant, HopVariant, list[dict[int, Any]]]:
    """The raw loop and the Chorus service (make_hop_variants), one untimed throughput
    trial each (first connections, JIT-free but cache-warm code paths), then the timed
    rounds: index 0 of each round is the raw loop's trial, 1 Chorus's."""
    s = b.sizes
    raw, chorus = await make_hop_variants(b, raw_name, raw_db, chorus_service)
    for v in (raw, chorus):
        await hop_throughput(b, v, max(200, s.hop_messages // 5))
    rounds = await interleaved(s.rounds, [raw, chorus], lambda v: hop_throughput(b, v, s.hop_messages))
    return raw, chorus, rounds


def hop_rates(rounds: list[dict[int, Any]]) -> tuple[list[float], list[float]]:
    """Each round's messages/s (hop_rounds): the raw loop's, then Chorus's."""
    return [r[0]["per_s"] for r in rounds], [r[1]["per_s"] for r in rounds]


async def section_hops(b: Bench) -> None:
    """R1, R2 and R4: the raw loop against a Chorus service whose handler does nothing."""
    s = b.sizes
    b.log("R1/R2: raw loop vs Chorus no-op handler")
    raw, chorus, rounds = await hop_rounds(b, "bench.raw", False, "noop")
    r1, r2 = hop_rates(rounds)
    b.results["R1"] = {"what": "raw aiokafka loop, messages/s", **summary(r1)}
    b.results["R2"] = {
        "what": "Chorus no-op handler, messages/s",
        "chorus": summary(r2),
        "ratio": ratio(r2, r1),
        "target": ">= 0.8",
    }
    b.log(f"R1 {summary(r1)['median']:.0f}/s  R2 {summary(r2)['median']:.0f}/s")

    rate = 0.5 * summary(r2)["median"]
    b.log(f"R4: latency, one in flight and open loop at {rate:.0f}/s (50% of Chorus max)")
    for v in (raw, chorus):
        await v.worker.call("resume")

    async def latency_trial(v: HopVariant) -> dict[str, Any]:
        one = await hop_inflight(b, v, s.inflight_messages)
        before = await handle_buckets(v.worker)
        meter = await Meter(b, [v.worker.pid], [BENCH_DB]).open()
        loaded = await hop_open_loop(b, v, rate, s.load_seconds)
        usage = await meter.close()
        out: dict[str, Any] = {
            "inflight": pct(one),
            "load": pct(loaded),
            # Share of one core the measured process used while the open loop ran.
            "cpu_utilization": usage.service_cpu_s / usage.wall_s,
        }
        if before:
            after = await handle_buckets(v.worker)
            out["handle_ms"] = {
                q: bucket_quantile(before, after, x) for q, x in (("p50", 0.5), ("p99", 0.99))
            }
        return out

    lat = await interleaved(s.rounds, [raw, chorus], latency_trial)
    for v in (raw, chorus):
        await v.worker.call("pause")
    r4: dict[str, Any] = {"what": "per-hop latency, Chorus minus raw loop (ms)", "rate_per_s": rate}
    for cond in ("inflight", "load"):
        r4[cond] = {
            "raw": {q: summary([r[0][cond][q] for r in lat]) for q in ("p50", "p99")},
            "chorus": {q: summary([r[1][cond][q] for r in lat]) for q in ("p50", "p99")},
            "tax": {q: summary([r[1][cond][q] - r[0][cond][q] for r in lat]) for q in ("p50", "p99")},
        }
    # Of Chorus's hop, the part from reading the record to committing its outcome (the
    # runtime's histogram, bucket upper bounds); the rest is outbox relay + Kafka.
    r4["load"]["cpu_utilization"] = {
        "raw": summary([r[0]["cpu_utilization"] for r in lat]),
        "chorus": summary([r[1]["cpu_utilization"] for r in lat]),
    }
    r4["load"]["chorus_handle_ms"] = {q: summary([r[1]["handle_ms"][q] for r in lat]) for q in ("p50", "p99")}
    r4["target"] = "p50 <= +2 ms, p99 <= +10 ms"
    b.results["R4"] = r4
    taxes = {c: [r4[c]["tax"][q]["median"] for q in ("p50", "p99")] for c in ("inflight", "load")}
    b.log(f"R4 tax p50/p99 (ms): one in flight {taxes['inflight']}, at 50% load {taxes['load']}")
    await asyncio.gather(raw.worker.stop(), chorus.worker.stop())


async def section_durable(b: Bench) -> None:
    """R3: a state-changing Chorus handler vs the raw loop plus one INSERT+COMMIT; a profile."""
    s = b.sizes
    b.log("R3: raw loop + INSERT vs Chorus durable handler")
    raw, chorus, rounds = await hop_rounds(b, "bench.rawdb", True, "durable")
    base, mine = hop_rates(rounds)
    b.results["R3"] = {
        "what": "Chorus durable hop vs raw loop + asyncpg INSERT+COMMIT, messages/s",
        "baseline": summary(base),
        "chorus": summary(mine),
        "ratio": ratio(mine, base),
        "cpu_ms_per_msg": {
            "raw": summary([1000 * r[0]["usage"]["service_cpu_s"] / s.hop_messages for r in rounds]),
            "chorus": summary([1000 * r[1]["usage"]["service_cpu_s"] / s.hop_messages for r in rounds]),
            "postgres_raw": summary(
                [1000 * r[0]["usage"]["postgres_cpu_s"] / s.hop_messages for r in rounds]
            ),
            "postgres_chorus": summary(
                [1000 * r[1]["usage"]["postgres_cpu_s"] / s.hop_messages for r in rounds]
            ),
        },
        "target": ">= 0.9",
    }
    b.log(f"R3 baseline {summary(base)['median']:.0f}/s  Chorus {summary(mine)['median']:.0f}/s")

    # The profile: the same service, restarted under py-spy (attaching to a running
    # process is refused here; py-spy may trace its own child), one throughput trial.
    await chorus.worker.stop()
    raw_profile = b.out / "profile-chorus-durable.txt"
    profiled = profiled_worker(
        "chorus-durable-profiled", "chorus-durable", SPY, "raw", raw_profile, b.chorus_env(), b.logs
    )
    await b.started(profiled)
    await profiled.call("ready")
    chorus.worker = profiled
    trial = await hop_throughput(b, chorus, s.profile_messages)
    await profiled.stop()
    assert profiled.proc is not None
    await asyncio.wait_for(profiled.proc.wait(), 60)
    profile = top_frames(raw_profile)
    profile["throughput_under_profiler_per_s"] = trial["per_s"]
    b.results["profile"] = profile
    await raw.worker.stop()


# -- R5: 5-step workflows, Chorus vs DBOS and Restate ------------------------------------------------


@dataclass
class Baseline:
    """A workflow engine R5 compares with (DBOS, Restate): a worker in its own venv, steered
    like bench/dbos/worker.py, which times its workflows as its client sees them."""

    worker: Worker
    databases: list[str]
    """The PostgreSQL databases its backends serve (their CPU is metered)."""

    @property
    def pids(self) -> list[int]:
        """The worker and the processes it started (Restate: restate-server, the SDK endpoint)."""
        return [self.worker.pid, *(int(p) for p in self.worker.hello.get("pids", []))]

    async def throughput(self, b: Bench, w: int) -> dict[str, Any]:
        meter = await Meter(b, self.pids, self.databases).open()
        reply = await self.worker.call("throughput", timeout_s=600 + 2 * w, workflows=w)
        usage = await meter.close()
        return {"per_s": w / reply["elapsed_s"], "usage": asdict(usage)}

    async def latency(self, m: int) -> list[float]:
        reply = await self.worker.call("latency", timeout_s=600, workflows=m)
        return [float(x) for x in reply["latencies_ms"]]

    async def closed(self, w: int) -> dict[str, Any]:
        reply = await self.worker.call("closed", timeout_s=600 + w, workflows=w, in_flight=CLOSED_IN_FLIGHT)
        return {"per_s": w / reply["elapsed_s"], "latency": pct([float(x) for x in reply["latencies_ms"]])}


def side_worker(name: str, venv: Path, env: dict[str, str], b: Bench) -> Worker:
    """bench/<name>/worker.py in its venv (bench/<name>/make-venv.sh builds it)."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"{python} missing: run bench/{name}/make-venv.sh (make bench does)")
    return Worker(name, [str(python), str(ROOT / "bench" / name / "worker.py")], env, b.logs)


async def start_baselines(b: Bench) -> tuple[Baseline, Baseline]:
    """DBOS and Restate, started side by side; their versions go into the environment."""
    server = restate_binary(RESTATE_DIR)
    if not server.exists():
        raise RuntimeError(f"{server} missing: run bench/restate/make-venv.sh (make bench does)")
    # A killed run leaves its data directory behind (its server is gone with it): under the
    # run lock, nothing else uses them.
    shutil.rmtree(RESTATE_DIR / "runs", ignore_errors=True)
    dbos_env = {
        "DBOS_SYSTEM_URL": db_url(b.admin_url, DBOS_SYS_DB),
        "DBOS_APP_URL": db_url(b.admin_url, DBOS_APP_DB),
    }
    restate_env = {
        "RESTATE_SERVER_BIN": str(server),
        "RESTATE_APP_URL": db_url(b.admin_url, RESTATE_APP_DB),
        "RESTATE_WORK_DIR": str(RESTATE_DIR),
    }
    dbos, restate = await asyncio.gather(
        b.started(side_worker("dbos", DBOS_VENV, dbos_env, b)),
        b.started(side_worker("restate", RESTATE_VENV, restate_env, b)),
    )
    for name, worker in (("dbos", dbos), ("restate", restate)):
        b.results.setdefault("environment", {})[name] = {
            "mode": worker.hello.get("mode"),
            **worker.hello.get("versions", {}),
        }
    return Baseline(dbos, [DBOS_APP_DB, DBOS_SYS_DB]), Baseline(restate, [RESTATE_APP_DB])


def versus(rounds: list[dict[int, Any]], i: int) -> dict[str, Any]:
    """Chorus's R5 (variant 0) over variant ``i``'s, round by round: workflows/s of the backlog,
    one-at-a-time p50 and p99 (below 1: Chorus is faster), closed-loop workflows/s."""

    def per_round(get: Callable[[dict[str, Any]], float]) -> dict[str, Any]:
        return summary([get(r[0]) / get(r[i]) for r in rounds])

    return {
        "per_s": per_round(lambda t: t["per_s"]),
        "p50": per_round(lambda t: t["latency"]["p50"]),
        "p99": per_round(lambda t: t["latency"]["p99"]),
        "closed_per_s": per_round(lambda t: t["closed"]["per_s"]),
    }


@dataclass
class FlowDriver:
    """Starts bench_flow workflows and waits for their ends (bench.flow_done).

    With ``keys`` it drives bench_sealed_flow instead: each workflow names a data subject of
    its own, and its first event carries the note sealed under that subject's key, as the
    gateway publishes what a submitter sends (so the flow's first step opens a token, too).
    """

    b: Bench
    listener: Listener
    steps_topic: str
    factory: EnvelopeFactory
    pad: str
    keys: HttpKeyStore | None = None
    subject_key: str = ""
    """The secret subject references are keyed under, the gateway's (CHORUS_SUBJECT_KEY)."""
    subjects: dict[str, tuple[str, DataKey]] = field(default_factory=dict)
    """Workflow -> its subject reference and data key, made by ``prepare``."""

    @classmethod
    async def start(cls, b: Bench, keys: HttpKeyStore | None = None) -> FlowDriver:
        done, steps = ("bench.flow_done", "bench.step")
        if keys is not None:
            done, steps = ("bench.sealed_done", "bench.sealed_step")
        listener = Listener(
            b.bootstrap,
            b.reg().physical_topic(done),
            key_of=lambda body: str(body["workflow_id"]),
            sent_of=lambda body: int(body["payload"]["started_ns"]),
        )
        await listener.start()
        b.cleanup.append(listener.stop)
        secret = ServiceSettings().subject_key
        if keys is None:
            factory = EnvelopeFactory(bench_events.FlowStep(step=1, started_ns=0), workflow_type="bench")
            pad = pad_for(factory, {"step": 1, "started_ns": run_ns()})
        else:
            first = bench_events.SealedStep(step=1, started_ns=0, note=bench_events.NOTE)
            subject = keyed_ref(secret, "bench-subject-wf-template")
            factory = EnvelopeFactory(first, workflow_type="bench", subject_ref=subject)
            # Sized with the note sealed, as it travels, to the plain flow's ~1 KB: both
            # variants move records of one size, and the ratio is that of the sealing.
            token = seal_value(DataKey(f"{keys.region}.{'0' * 32}", bytes(32)), uuid.uuid4(), first.note)
            pad = pad_for(factory, {"step": 1, "started_ns": run_ns(), "note": str(token)})
        return cls(b, listener, b.reg().physical_topic(steps), factory, pad, keys, secret)

    async def prepare(self, wfs: list[str]) -> None:
        """Sealed flow: a new subject per workflow, its key made before any clock starts (the
        gateway's part). The flow service fetches it itself: a key cache it never hits across
        workflows, the costliest case for it."""
        if self.keys is None:
            return
        keys, limit = self.keys, asyncio.Semaphore(16)  # within the HTTP client's pool

        async def one(wf: str) -> None:
            subject = keyed_ref(self.subject_key, f"bench-subject-{wf}")  # as the gateway keys it
            async with limit:
                key = await keys.data_key(Scope(keys.region, subject_hash(subject), wf))
            self.subjects[wf] = (subject, key)

        await asyncio.gather(*(one(wf) for wf in wfs))

    def encode(self, wf: str, started_ns: int) -> bytes:
        """The first event of workflow ``wf`` (sealed flow: after ``prepare``)."""
        payload: dict[str, Any] = {"step": 1, "started_ns": started_ns, "pad": self.pad}
        if self.keys is None:
            return self.factory.encode(wf, payload)
        subject, key = self.subjects.pop(wf)
        body = self.factory.make(wf, payload)
        body["subject_ref"] = subject
        body["payload"] = {**payload, "note": str(seal_value(key, body["event_id"], bench_events.NOTE))}
        return json.dumps(body).encode()

    async def one(self, wf: str) -> float:
        """Start one workflow and wait for its end; its latency in ms."""
        waiter = self.listener.expect(wf)
        sent = run_ns()
        value = self.encode(wf, sent)
        await self.b.prod().send(self.steps_topic, value, key=wf.encode())
        seen = await asyncio.wait_for(waiter, 60)
        return (seen.recv_ns - sent) / 1e6


async def closed_loop(driver: FlowDriver, wfs: list[str]) -> dict[str, Any]:
    """A client's closed loop over ``wfs`` (prepared, the flow service running):
    CLOSED_IN_FLIGHT workflows running, each end starts the next."""
    queue = iter(wfs)
    latencies: list[float] = []

    async def client() -> None:
        for wf in queue:
            latencies.append(await driver.one(wf))

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(CLOSED_IN_FLIGHT)))
    return {"per_s": len(wfs) / (time.perf_counter() - t0), "latency": pct(latencies)}


@dataclass
class Flow:
    """A Chorus flow service under test, and what drives it."""

    worker: Worker
    driver: FlowDriver
    helpers: list[int] = field(default_factory=list)
    """Processes that do part of its work, whose CPU counts as its own (the key service)."""

    @property
    def pids(self) -> list[int]:
        return [self.worker.pid, *self.helpers]


async def start_key_service(b: Bench) -> tuple[ServiceProc, HttpKeyStore, str]:
    """The key service of the sealed flow, on this run's database and topics, and a client
    of it for the driver."""
    # Its own consumer group: the default name is shared with every dev stack and test
    # session on this broker, whose key services would rebalance with this one.
    api_port, tls = free_port(), key_service_tls(b.chorus_env())
    env = {
        **b.chorus_env(),
        **tls,
        "CHORUS_GROUP_ID": f"key_service-{b.suffix}",
        "CHORUS_API_PORT": str(api_port),
        # Its callers: the driver (as the gateway) and the sealed flow, whose name is in no
        # principals.yaml, so the demo's default (every registered service) leaves it out.
        "CHORUS_KEY_SERVICE_CLIENTS": json.dumps(
            {demo_key_service_credential(s): s for s in ("gateway", bench_events.SEALED_FLOW)}
        ),
    }
    service = ServiceProc("key_service", env, b.logs)
    b.cleanup.append(service.stop)
    await service.start()
    trust = key_service_trust(tls[KEY_SERVICE_CA])
    async with key_api(api_port, verify=trust):
        pass  # its TLS API answers
    client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=3.0), verify=trust)
    b.cleanup.append(client.aclose)
    url = f"https://127.0.0.1:{api_port}"
    keys = HttpKeyStore(LOCAL_REGION, url, demo_key_service_credential("gateway"), client)
    return service, keys, tls[KEY_SERVICE_CA]


async def section_workflows(b: Bench) -> None:
    s = b.sizes
    b.log("R5: 5-step workflow, Chorus vs DBOS Transact and Restate, and Chorus with personal data sealed")
    key_service, keys, ca_file = await start_key_service(b)
    # Only the sealed flow is told where the key service is: the plain one runs as before.
    sealed_env = {
        **b.chorus_env(),
        "CHORUS_KEY_STORES": json.dumps({keys.region: keys.url}),
        KEY_SERVICE_CA: ca_file,
    }
    flow_worker, sealed_worker, (dbos, restate) = await asyncio.gather(
        b.started(bench_worker("chorus-flow", "chorus-flow", b.chorus_env(), b.logs)),
        b.started(bench_worker("chorus-sealed-flow", "chorus-sealed_flow", sealed_env, b.logs)),
        start_baselines(b),
    )
    await asyncio.gather(flow_worker.call("ready"), sealed_worker.call("ready"))
    flow = Flow(flow_worker, await FlowDriver.start(b))
    sealed = Flow(sealed_worker, await FlowDriver.start(b, keys), [key_service.pid])
    steps = 5

    async def chorus_throughput(f: Flow, w: int) -> dict[str, Any]:
        wfs = [f"flow-{b.suffix}-{i}" for i in b.next_seqs(w)]
        await f.driver.prepare(wfs)
        start = await f.driver.listener.end_offsets()
        await produce_all(
            b.prod(), f.driver.steps_topic, [(wf.encode(), f.driver.encode(wf, 0)) for wf in wfs]
        )
        meter = await Meter(b, f.pids, [BENCH_DB]).open()
        t0 = time.time()
        await f.worker.call("resume")
        await f.driver.listener.wait_count(start, w, timeout_s=120 + w)
        usage = await meter.close()
        seen = await f.driver.listener.collect(start, set(wfs), timeout_s=120)  # before pausing, as in R2
        await f.worker.call("pause")
        last = max(x.ts_ms for x in seen.values()) / 1000
        return {"per_s": w / (last - t0), "usage": asdict(usage)}

    async def chorus_latency(f: Flow, m: int) -> list[float]:
        wfs = [f"flow-{b.suffix}-{i}" for i in b.next_seqs(m)]
        await f.driver.prepare(wfs)
        traced = f is flow  # the hop breakdown is the plain flow's
        await f.worker.call("resume")
        f.driver.listener.live()
        if traced:
            await f.worker.call("trace")
        try:
            out = [await f.driver.one(wf) for wf in wfs]
        finally:
            f.driver.listener.pause()
            trace = await f.worker.call("hops") if traced else None
            await f.worker.call("pause")
        if trace is not None:
            traces.append(trace)
        return out

    async def chorus_closed(f: Flow, w: int) -> dict[str, Any]:
        wfs = [f"flow-{b.suffix}-{i}" for i in b.next_seqs(w)]
        await f.driver.prepare(wfs)
        await f.worker.call("resume")
        f.driver.listener.live()
        try:
            return await closed_loop(f.driver, wfs)
        finally:
            f.driver.listener.pause()
            await f.worker.call("pause")

    baselines = {"dbos": dbos, "restate": restate}

    async def trial(variant: str) -> dict[str, Any]:
        if variant in baselines:
            base = baselines[variant]
            thr = await base.throughput(b, s.flow_workflows)
            lat = await base.latency(s.flow_latency)
            closed = await base.closed(s.flow_closed)
        else:
            f = flow if variant == "chorus" else sealed
            thr = await chorus_throughput(f, s.flow_workflows)
            lat = await chorus_latency(f, s.flow_latency)
            closed = await chorus_closed(f, s.flow_closed)
        return {**thr, "latency": pct(lat), "latencies": lat, "closed": closed}

    traces: list[dict[str, Any]] = []

    await chorus_throughput(flow, max(10, s.flow_workflows // 4))  # warm-up, untimed
    await chorus_throughput(sealed, max(10, s.flow_workflows // 4))
    for base in (dbos, restate):
        await base.throughput(b, max(10, s.flow_workflows // 4))
    # The sealed flow is a variant of the same rounds, so that sealed/plain is a ratio of two
    # trials seconds apart, like Chorus/DBOS and Chorus/Restate.
    rounds = await interleaved(s.rounds, ["chorus", "sealed", "dbos", "restate"], trial)
    variants = ((0, "chorus"), (2, "dbos"), (3, "restate"))
    out: dict[str, Any] = {"what": "5-step workflows/s and end-to-end latency (one in flight)"}
    for i, name in variants:
        out[name] = {
            "per_s": summary([r[i]["per_s"] for r in rounds]),
            "p50_ms": summary([r[i]["latency"]["p50"] for r in rounds]),
            "p99_ms": summary([r[i]["latency"]["p99"] for r in rounds]),
        }
    out["ratio"] = summary([r[0]["per_s"] / r[2]["per_s"] for r in rounds])
    out["p50_diff_ms"] = summary([r[0]["latency"]["p50"] - r[2]["latency"]["p50"] for r in rounds])
    out["target"] = ">= 1.5x DBOS throughput, p50 no worse; one at a time p50 <= 12 ms, p99 <= 25 ms"
    # Chorus over each baseline, per round (issue targets against Restate: one-at-a-time p50
    # <= 0.8x Restate's, p99 <= Restate's, closed-loop throughput >= 3x Restate's).
    out["vs"] = {"dbos": versus(rounds, 2), "restate": versus(rounds, 3)}
    out["restate_target"] = (
        "one at a time p50 <= 0.8x Restate's, p99 <= Restate's; closed loop >= 3x Restate's"
    )
    out["closed"] = {
        "what": f"closed loop, {CLOSED_IN_FLIGHT} workflows in flight, each end starts the next",
        "target": ">= 250 workflows/s, p99 <= 150 ms",
        **{
            name: {
                "per_s": summary([r[i]["closed"]["per_s"] for r in rounds]),
                "p50_ms": summary([r[i]["closed"]["latency"]["p50"] for r in rounds]),
                "p99_ms": summary([r[i]["closed"]["latency"]["p99"] for r in rounds]),
            }
            for i, name in variants
        },
    }
    out["sealed"] = {
        "what": (
            f"R5 with encryption on: a personal note ({len(bench_events.NOTE)} characters) in every "
            "event, opened and sealed again by each step; every workflow a new data subject, "
            "its key fetched from the key service (a process of this run)"
        ),
        "per_s": summary([r[1]["per_s"] for r in rounds]),
        "p50_ms": summary([r[1]["latency"]["p50"] for r in rounds]),
        "p99_ms": summary([r[1]["latency"]["p99"] for r in rounds]),
        "ratio": summary([r[1]["per_s"] / r[0]["per_s"] for r in rounds]),
        "p50_diff_ms": summary([r[1]["latency"]["p50"] - r[0]["latency"]["p50"] for r in rounds]),
        "p99_diff_ms": summary([r[1]["latency"]["p99"] - r[0]["latency"]["p99"] for r in rounds]),
        "closed": {
            "per_s": summary([r[1]["closed"]["per_s"] for r in rounds]),
            "p50_ms": summary([r[1]["closed"]["latency"]["p50"] for r in rounds]),
            "p99_ms": summary([r[1]["closed"]["latency"]["p99"] for r in rounds]),
            "ratio": summary([r[1]["closed"]["per_s"] / r[0]["closed"]["per_s"] for r in rounds]),
        },
    }
    out["breakdown"] = breakdown(traces)
    b.results["R5"] = out

    per_step = steps * s.flow_workflows
    cpu: dict[str, Any] = {"what": "CPU ms per workflow step, from /proc (R5 throughput trials)"}
    for i, name in ((0, "chorus"), (1, "sealed"), (2, "dbos"), (3, "restate")):
        usages = [r[i]["usage"] for r in rounds]
        cpu[name] = {
            "service": summary([1000 * u["service_cpu_s"] / per_step for u in usages]),
            "postgres": summary([1000 * u["postgres_cpu_s"] / per_step for u in usages]),
            "broker": summary([1000 * u["broker_cpu_s"] / per_step for u in usages]),
            "machine_busy": summary([1000 * u["machine_busy_s"] / per_step for u in usages]),
        }
    cpu["note"] = (
        "broker and machine_busy include whatever else ran on the shared machine; "
        "postgres counts only the backends of the benchmark's databases; "
        "sealed's service is the flow service and the key service together; "
        "dbos's is its process (client and workflows); restate's its client, SDK endpoint and restate-server"
    )
    b.results["cpu"] = cpu
    b.log(
        f"R5 Chorus {out['chorus']['per_s']['median']:.1f}/s vs DBOS {out['dbos']['per_s']['median']:.1f}/s, "
        f"Restate {out['restate']['per_s']['median']:.1f}/s; "
        f"sealed {out['sealed']['per_s']['median']:.1f}/s (x{out['sealed']['ratio']['median']:.2f})"
    )
    await asyncio.gather(dbos.worker.stop(), restate.worker.stop(), sealed.worker.stop(), key_service.stop())

    # A flame graph of the flow service in closed-loop trials: the same service, restarted
    # under py-spy. Long enough that its start (imports) is a small part of the samples.
    await flow.worker.stop()
    flame = b.out / "flame-chorus-flow.svg"
    flow.worker = profiled_worker(
        "chorus-flow-profiled", "chorus-flow", SPY, "flamegraph", flame, b.chorus_env(), b.logs
    )
    await b.started(flow.worker)
    await flow.worker.call("ready")
    under = await chorus_closed(flow, 4 * s.flow_closed)
    await flow.worker.stop()
    assert flow.worker.proc is not None
    await asyncio.wait_for(flow.worker.proc.wait(), 60)
    out["flame_graph"] = {"file": flame.name, "closed_loop_per_s_under_profiler": under["per_s"]}


# -- same-run A/B of two source trees --------------------------------------------------------------


async def section_ab(b: Bench) -> None:
    """R5's one-at-a-time latency and hop breakdown: this tree (A) against ``--ab`` (B).

    One flow service runs at a time, started afresh per trial from its tree (B's by
    PYTHONPATH), alternating A B, B A, ... so both meet the same machine within
    seconds of each other: on this shared machine, runs minutes apart differ by more
    than most single changes.
    """
    assert b.ab_tree is not None  # main() refuses the section without --ab
    tree = b.ab_tree.resolve()
    s = b.sizes
    b.log(f"A/B: flow latency, this tree (A) vs {tree} (B)")
    driver = await FlowDriver.start(b)
    trees = {"A": ROOT, "B": tree}
    traces: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    loops: dict[str, str] = {}

    async def trial(variant: str) -> dict[str, Any]:
        # B's bench worker and runtime: its tree first on the path (the venv's .pth names A's).
        env = {**b.chorus_env(), "PYTHONPATH": f"{trees[variant] / 'services'}:{trees[variant]}"}
        flow = bench_worker(f"chorus-flow-{variant}", "chorus-flow", env, b.logs, trees[variant])
        hello = await flow.start()
        loops[variant] = hello.get("loop", "not reported (an older tree)")
        try:
            await flow.call("ready")
            await flow.call("resume")
            driver.listener.live()
            for i in b.next_seqs(10):  # first connections, statement caches: untimed
                await driver.one(f"ab-{b.suffix}-{i}")
            await flow.call("trace")
            lat = [await driver.one(f"ab-{b.suffix}-{i}") for i in b.next_seqs(s.flow_latency)]
            traces[variant].append(await flow.call("hops"))
            closed = await closed_loop(driver, [f"ab-{b.suffix}-{i}" for i in b.next_seqs(s.flow_closed)])
        finally:
            driver.listener.pause()
            await flow.stop()
        return {**pct(lat), "closed_per_s": closed["per_s"]}

    rounds = await interleaved(2 * s.rounds, ["A", "B"], trial)
    out: dict[str, Any] = {"what": "R5 one at a time and closed loop: A = this tree, B = " + str(tree)}
    for i, name in ((0, "A"), (1, "B")):
        out[name] = {q: summary([r[i][q] for r in rounds]) for q in ("p50", "p99", "closed_per_s")}
        out[name]["event_loop"] = loops[name]
        out[name]["breakdown"] = breakdown(traces[name])
    out["B_minus_A_ms"] = {q: summary([r[1][q] - r[0][q] for r in rounds]) for q in ("p50", "p99")}
    out["closed_A_over_B"] = summary([r[0]["closed_per_s"] / r[1]["closed_per_s"] for r in rounds])
    b.results["ab"] = out
    b.log(
        f"A/B p50 A {out['A']['p50']['median']:.1f} ms, B {out['B']['p50']['median']:.1f} ms; closed loop "
        f"A/B {out['closed_A_over_B']['median']:.2f}"
    )


# -- signing ---------------------------------------------------------------------------------------


def bench_signing_dir() -> Path:
    if not os.environ.get("CHORUS_SIGNING_DIR"):
        raise RuntimeError("CHORUS_SIGNING_DIR is not set: run through make (it holds the local keys)")
    return Path(os.environ["CHORUS_SIGNING_DIR"])


def bench_keys(b: Bench) -> None:
    """The bench's own signers' keys, for the run: every bench service checks signed types
    (the bench registry's signed topics among them), so they exist before the first section
    and go with the run."""
    signing_dir = bench_signing_dir()
    made = make_keys(signing_dir, [bench_events.DRIVER_SIGNER, bench_events.SIGNED_NOOP])

    async def remove_keys() -> None:
        for name in made:
            for suffix in (".key", ".pub"):
                (signing_dir / f"{name}{suffix}").unlink(missing_ok=True)

    b.cleanup.append(remove_keys)


async def section_signing(b: Bench) -> None:
    """The cost of signing every event: the no-op hop with its two types unsigned (A, R2's
    service) and signed (B: it checks the driver's Ed25519 signature of each input before
    its handler and signs its output in the outbox), same-run, interleaved rounds."""
    s = b.sizes
    b.log("signing: no-op hop, unsigned (A) vs signed (B)")
    signing_dir = bench_signing_dir()
    driver = load_keys(str(signing_dir), bench_events.DRIVER_SIGNER, signs={"*"}, checks={}).signer
    reg = b.reg()
    variants = []
    for kind, ping, pong, signer in (
        ("noop", bench_events.NoopPing, "bench.noop_pong", None),
        ("signed_noop", bench_events.SignedPing, "bench.signed_pong", driver),
    ):
        worker = await b.started(bench_worker(f"chorus-{kind}", f"chorus-{kind}", b.chorus_env(), b.logs))
        await worker.call("ready")
        factory = EnvelopeFactory(ping(seq=0, sent_ns=0))
        pad = pad_for(factory, {"seq": 10**9, "sent_ns": run_ns()})
        listener = hop_listener(b, reg.physical_topic(pong))
        await listener.start()
        b.cleanup.append(listener.stop)
        in_topic = reg.physical_topic(ping.event_type)
        variants.append(HopVariant(f"chorus-{kind}", worker, in_topic, listener, factory, pad, signer))
    for v in variants:
        await hop_throughput(b, v, max(200, s.hop_messages // 5))  # untimed: first connections
    rounds = await interleaved(s.rounds, variants, lambda v: hop_throughput(b, v, s.hop_messages))
    rates = [[r[i]["per_s"] for r in rounds] for i in (0, 1)]
    cpu_us = [[1e6 * r[i]["usage"]["service_cpu_s"] / s.hop_messages for r in rounds] for i in (0, 1)]
    b.results["signing"] = {
        "what": "no-op hop, messages/s: A unsigned, B both events signed (verify + sign per hop)",
        "A": summary(rates[0]),
        "B": summary(rates[1]),
        "ratio": ratio(rates[1], rates[0]),
        "service_cpu_us_per_message": {"A": summary(cpu_us[0]), "B": summary(cpu_us[1])},
    }
    b.log(
        f"signing: A {summary(rates[0])['median']:.0f}/s, B {summary(rates[1])['median']:.0f}/s, "
        f"ratio {ratio(rates[1], rates[0])['median']:.2f}"
    )
    await asyncio.gather(*(v.worker.stop() for v in variants))


# -- timers ----------------------------------------------------------------------------------------


async def count_rows(b: Bench, sql: str) -> int:
    conn = await asyncpg.connect(b.bench_url)
    try:
        return int(await conn.fetchval(sql))
    except asyncpg.UndefinedTableError:
        return 0
    finally:
        await conn.close()


async def wait_for(
    what: str, probe: Callable[[], Awaitable[bool]], timeout_s: float, alive: Callable[[], None]
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await probe():
        alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.2)


def iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat()


async def section_timers(b: Bench) -> None:
    s = b.sizes
    n = s.timers
    reg = b.reg()
    b.log(f"timers: {n} timer.schedule commands to the real timer service")
    fired_topic = reg.physical_topic("bench.timer_fired")
    schedule_topic = reg.physical_topic("timer.schedule")
    fire = EnvelopeFactory(bench_events.TimerFired(due_ns=0))
    command = EnvelopeFactory(
        TimerSchedule(
            timer_id="t",
            due_at=datetime.now(timezone.utc),
            fire=FireTarget(topic=fired_topic, key="k", value={}),
        )
    )

    def commands(prefix: str, count: int, due0: float, spread: float) -> list[tuple[bytes, bytes]]:
        out = []
        for i in range(count):
            due_ns = int((due0 + spread * i / count) * 1e9)
            wf = f"timer-{b.suffix}-{prefix}{i}"
            payload = {
                "timer_id": f"bench-{b.suffix}-{prefix}{i}",
                "due_at": iso(due_ns),
                "fire": {
                    "topic": fired_topic,
                    "key": wf,
                    "value": fire.make(wf, {"due_ns": due_ns - EPOCH_NS}),
                },
                "purpose": "reminder",
            }
            out.append((wf.encode(), command.encode(wf, payload)))
        return out

    service = ServiceProc("timer_service", b.chorus_env(), b.logs)
    b.cleanup.append(service.stop)
    await service.start()

    async def scheduled(prefix: str, count: int) -> tuple[float, float]:
        """Wait until ``count`` timers of the batch are rows; returns (rate/s, seconds)."""
        like = f"timer_id LIKE 'bench-{b.suffix}-{prefix}%'"

        async def done() -> bool:
            return await count_rows(b, f"SELECT count(*) FROM timer_service.timers WHERE {like}") >= count

        await wait_for(f"{count} timers scheduled", done, 60 + count / 20, service.check_alive)
        conn = await asyncpg.connect(b.bench_url)
        try:
            row = await conn.fetchrow(
                "SELECT extract(epoch FROM max(created_at) - min(created_at)) AS s"
                f" FROM timer_service.timers WHERE {like}"
            )
        finally:
            await conn.close()
        seconds = float(row["s"])
        return (count - 1) / seconds if seconds > 0 else float("inf"), seconds

    # Pilot: a few timers due in an hour (they never fire here) measure the schedule
    # rate, so the measured timers fall due after all of them are scheduled and the
    # lateness is that of firing at due time, not of firing behind a schedule backlog.
    pilot = max(200, n // 25)
    await produce_all(b.prod(), schedule_topic, commands("p", pilot, time.time() + 3600, 1.0))
    pilot_rate, _ = await scheduled("p", pilot)
    lead_s = 3 + 1.3 * n / pilot_rate + n * 40e-6  # + building the commands
    due0 = time.time() + lead_s
    messages = commands("m", n, due0, s.timer_spread_s)
    listener = Listener(
        b.bootstrap,
        fired_topic,
        key_of=lambda body: str(body["workflow_id"]),
        sent_of=lambda body: int(body["payload"]["due_ns"]),
    )
    await listener.start()
    b.cleanup.append(listener.stop)
    listener.live()
    await produce_all(b.prod(), schedule_topic, messages)
    rate, _ = await scheduled("m", n)
    scheduled_at = time.time()
    keys = {f"timer-{b.suffix}-m{i}" for i in range(n)}

    async def all_fired() -> bool:
        return len(keys & listener.seen.keys()) >= n

    await wait_for(
        "timers fired",
        all_fired,
        max(0.0, due0 - time.time()) + s.timer_spread_s + 300,
        service.check_alive,
    )
    listener.pause()
    lateness = [(listener.seen[k].recv_ns - listener.seen[k].sent_ns) / 1e6 for k in keys]
    conn = await asyncpg.connect(b.bench_url)
    try:
        inside = [
            float(r["lateness_ms"])
            for r in await conn.fetch(
                f"SELECT lateness_ms FROM timer_service.timers WHERE timer_id LIKE 'bench-{b.suffix}-m%'"
            )
        ]
    finally:
        await conn.close()
    b.results["timers"] = {
        "what": "timer.schedule -> timer service -> fired event at the target topic's consumer",
        "timers": n,
        "schedule_per_s": rate,
        "pilot_schedule_per_s": pilot_rate,
        "scheduled_before_first_due": scheduled_at < due0,
        "fire_spread_s": s.timer_spread_s,
        "lateness_ms": {
            "p50": percentile(lateness, 50),
            "p99": percentile(lateness, 99),
            "max": max(lateness),
        },
        "lateness_at_firing_loop_ms": {
            "p50": percentile(inside, 50),
            "p99": percentile(inside, 99),
        },
        "rss_mb": procstat.rss_bytes(service.pid) / 2**20,
        "target": "p99 <= 250 ms",
    }
    b.log(f"timers: {rate:.0f} scheduled/s, lateness p99 {b.results['timers']['lateness_ms']['p99']:.0f} ms")
    await service.stop()


# -- parked workflows ---------------------------------------------------------------------------


async def section_parked(b: Bench) -> None:
    s = b.sizes
    n = s.parked
    reg = b.reg()
    b.log(f"parked: {n} workflows waiting at the approval gate")
    gate = ServiceProc("approval_gate", b.chorus_env(), b.logs)
    timers = ServiceProc("timer_service", b.chorus_env(), b.logs)
    b.cleanup.extend([gate.stop, timers.stop])
    await asyncio.gather(gate.start(), timers.start())
    # Requests as the budget agent states them: signed with its local key (the gate refuses
    # a request from anyone else).
    factory = EnvelopeFactory(
        ApprovalRequested(
            approval_id="a",
            requested_by="bench",
            chain=[EscalationStep(tier="operator", window_s=3600)],
            context=ApprovalContext(summary="s"),
        ),
        producer=ProducerRef(service="budget_agent", version="bench"),
    )
    requester = load_keys(os.environ.get("CHORUS_SIGNING_DIR", ""), "budget_agent", signs={"*"}, checks={})
    assert requester.signer is not None
    topic = reg.physical_topic("approval.requested")
    procs = {"approval_gate": gate, "timer_service": timers}

    def alive() -> None:
        for p in procs.values():
            p.check_alive()

    async def db_size() -> int:
        conn = await asyncpg.connect(b.bench_url)
        try:
            return int(await conn.fetchval("SELECT pg_database_size(current_database())"))
        finally:
            await conn.close()

    def rss() -> dict[str, float]:
        return {name: procstat.rss_bytes(p.pid) / 2**20 for name, p in procs.items()}

    done = 0
    snapshots: list[dict[str, Any]] = [{"parked": 0, "rss_mb": rss()}]
    size0 = await db_size()
    warm = max(100, n // 100)
    for target in (warm, n // 2, n):
        batch = range(done, target)
        messages = []
        for i in batch:
            wf = f"parked-{b.suffix}-{i}"
            payload = {
                "approval_id": f"ap-{i}",
                "requested_by": "bench",
                "chain": [{"tier": "operator", "window_s": 3600.0}],
                "fallback": "auto_reject",
                "context": {"summary": f"bench parked workflow {i}", "why": "benchmark"},
            }
            messages.append((wf.encode(), factory.encode(wf, payload)))
        signed = [[requester.signer.header(value)] for _, value in messages]
        await produce_all(b.prod(), topic, messages, signed)

        progress = {"count": -1, "at": time.monotonic()}

        async def parked(total: int = target, progress: dict[str, float] = progress) -> bool:
            ours = f"workflow_id LIKE 'parked-{b.suffix}-%'"
            gated = await count_rows(b, f"SELECT count(*) FROM approval_gate.state WHERE {ours}")
            if gated != progress["count"]:
                progress.update(count=gated, at=time.monotonic())
            elif time.monotonic() - progress["at"] > 120:  # stalled (broker gone?): fail now
                raise RuntimeError(f"parked workflows stuck at {gated} of {total} for 120 s")
            waiting = await count_rows(
                b,
                "SELECT count(*) FROM timer_service.timers WHERE purpose = 'escalation'"
                f" AND status = 'pending' AND {ours}",
            )
            return gated >= total and waiting >= total

        await wait_for(f"{target} parked workflows", parked, 120 + target / 50, alive)
        await asyncio.sleep(1.0)  # let buffers drain before reading memory
        done = target
        snapshots.append({"parked": target, "rss_mb": rss()})
    size1 = await db_size()
    conn = await asyncpg.connect(b.bench_url)
    try:
        tables = await conn.fetch(
            """SELECT n.nspname || '.' || c.relname AS name, pg_total_relation_size(c.oid) AS bytes
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE c.relkind = 'r' AND n.nspname IN ('approval_gate', 'timer_service')
               ORDER BY bytes DESC"""
        )
    finally:
        await conn.close()
    half, full = snapshots[-2], snapshots[-1]
    slope = {
        name: (full["rss_mb"][name] - half["rss_mb"][name]) * 2**20 / (full["parked"] - half["parked"])
        for name in procs
    }
    b.results["parked"] = {
        "what": "workflows waiting at an approval gate (state row + pending timer)",
        "workflows": n,
        "snapshots": snapshots,
        "rss_growth_bytes_per_workflow": slope,
        "postgres_bytes_per_workflow": (size1 - size0) / n,
        "tables_mb": {r["name"]: r["bytes"] / 2**20 for r in tables},
        "target": "RSS flat (< 100 B per parked workflow between n/2 and n)",
    }
    b.log(f"parked: RSS {snapshots}, {(size1 - size0) / n:.0f} B of PostgreSQL per workflow")
    await asyncio.gather(gate.stop(), timers.stop())


# -- environment, setup, main ---------------------------------------------------------------


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _kafka_version() -> str:
    for jar in sorted((ROOT / ".local" / "kafka" / "lib").glob("kafka-server-*.jar")):
        return jar.stem.removeprefix("kafka-server-")
    return "unknown (broker not started by deploy/local/kafka.sh)"


def _memory_gb() -> float:
    return round(int(Path("/proc/meminfo").read_text().split()[1]) / 2**20, 1)


async def environment(b: Bench) -> dict[str, Any]:
    pg_version = await b.pg().fetchval("SHOW server_version")
    return {
        "machine": " ".join((platform.node(), platform.system(), platform.release(), platform.machine())),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "python": platform.python_version(),
        "kafka": _kafka_version(),
        "postgresql": pg_version,
        "libraries": {p: version(p) for p in ("aiokafka", "asyncpg", "pydantic", "pydantic-core")},
        "load_average_at_start": os.getloadavg(),
    }


async def prepare_databases(b: Bench) -> None:
    conn = b.pg()
    for name in (BENCH_DB, DBOS_APP_DB, DBOS_SYS_DB, RESTATE_APP_DB):
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {name}")


async def check_infrastructure(bootstrap: str, admin_url: str) -> asyncpg.Connection:
    try:
        conn = await asyncpg.connect(admin_url, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        raise SystemExit(f"bench: PostgreSQL at {admin_url} is not reachable ({exc}); `make up`") from exc
    host, _, port = bootstrap.partition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 10)
        writer.close()
    except (OSError, asyncio.TimeoutError) as exc:
        raise SystemExit(f"bench: Kafka at {bootstrap} is not reachable ({exc}); `make up`") from exc
    if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", RUN_LOCK):
        raise SystemExit("bench: another bench run holds the bench databases; wait for it")
    return conn


SECTIONS: dict[str, Callable[[Bench], Awaitable[None]]] = {
    "hops": section_hops,
    "durable": section_durable,
    "workflows": section_workflows,
    "signing": section_signing,
    "timers": section_timers,
    "parked": section_parked,
    "ab": section_ab,  # only with --ab PATH
}


async def run(mode: str, only: list[str], ab: Path | None = None) -> Path:
    sizes = QUICK if mode == "quick" else FULL
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"{stamp}-{mode}"
    (out / "logs").mkdir(parents=True)
    b = Bench(
        mode=mode,
        sizes=sizes,
        bootstrap=os.environ.get("CHORUS_KAFKA_BOOTSTRAP", LOCAL_KAFKA),
        admin_url=os.environ.get("CHORUS_DATABASE_URL", LOCAL_DATABASE_URL),
        out=out,
        ab_tree=ab,
    )
    started = time.perf_counter()
    failure: BaseException | None = None
    b.admin = await check_infrastructure(b.bootstrap, b.admin_url)
    b.broker_pids = [p for p in procstat.find_pids("kafka.Kafka")][:1]
    if not b.broker_pids:
        raise SystemExit("bench: no local Kafka broker process (kafka.Kafka) to measure")
    b.log(f"{mode} run into {out}")
    try:
        env = await environment(b)
        await prepare_databases(b)
        b.registry = await bench_registry(out / "work", b.suffix, b.bootstrap)
        bench_keys(b)
        b.producer = make_producer(b.bootstrap, client_id="bench-driver", linger_ms=0)
        await b.producer.start()
        b.results["environment"] = env
        for name, section in SECTIONS.items():
            if (only and name not in only) or (name == "ab" and ab is None):
                continue
            try:
                await section(b)
            except Exception as exc:
                # Keep what the earlier sections measured: a broker restart by a
                # concurrent suite must not throw away twenty minutes of results.
                b.results["failed_section"] = {"section": name, "error": repr(exc)}
                failure = exc
                break
    finally:
        for stop in reversed(b.cleanup):
            try:
                await stop()
            except Exception as exc:  # cleanup must not hide the first error
                b.log(f"cleanup: {exc!r}")
        if b.producer is not None:
            await b.producer.stop()
        try:
            deleted = await delete_topics(b.bootstrap, b.suffix)
            b.log(f"deleted {deleted} topics of this run")
        except Exception as exc:
            b.log(f"could not delete this run's topics: {exc!r}")
        await b.pg().close()
    b.results["mode"] = mode
    b.results["sizes"] = asdict(sizes)
    b.results["duration_s"] = time.perf_counter() - started
    b.results["started_at"] = stamp
    line = write_reports(out, b.results)
    chart(out)
    b.log(f"results: {out / 'results.md'}")
    if failure is not None:
        # No summary line: a script must not read a partial run as a complete one.
        raise SystemExit(f"bench: {b.results['failed_section']}; partial results in {out}")
    print(line, flush=True)
    return out


def chart(out: Path) -> None:
    python = TOOLS_VENV / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"{python} missing: run bench/make-venv.sh (make bench does)")
    subprocess.run(
        [
            str(python),
            str(ROOT / "bench" / "chart.py"),
            str(out / "results.json"),
            str(out / "chart.png"),
        ],
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("quick", "full"), default="quick")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(SECTIONS),
        default=[],
        help="run only these sections",
    )
    parser.add_argument(
        "--ab",
        type=Path,
        metavar="PATH",
        help="another checkout: the ab section compares R5's latency with it, same run",
    )
    args = parser.parse_args()
    if "ab" in args.only and args.ab is None:
        parser.error("the ab section compares with another checkout: pass --ab PATH")
    asyncio.run(run(args.mode, args.only, args.ab))


if __name__ == "__main__":
    main()
