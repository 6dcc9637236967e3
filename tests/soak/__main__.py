"""``python -m tests.soak``: hours, not minutes (``make soak``).

One deployment of every service, each in a network namespace of its own (so any of them
can be partitioned from the broker or the database while it runs), three brokers (RF 3,
min.insync.replicas 2) and a private PostgreSQL behind toxiproxy. First the capacity of
this machine is measured (a closed loop of the three reference workflows), then they are
driven at half of it while a fault drawn at random from a seed hits every 1 to 3 minutes,
sometimes two at once (tests/soak/schedule.py). A report every five minutes and at the
end (tests/soak/report.py); the last line is

    soak minutes=M seed=S workflows=N faults=K partitions=P doubles=D lost=0 duplicate_effects=0 stuck=0 ...

Exit status 0 only when every workflow settled as expected, nothing was lost or done
twice, and every process's RSS and open-file slopes stayed within their bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.reliability.deployment import SERVICES, Deployment, DeploymentConfig, FaultLog
from tests.reliability.driver import KINDS, Kind
from tests.reliability.infra import ROOT, KafkaCluster, PostgresServer
from tests.reliability.reconciler import reconcile
from tests.soak import schedule
from tests.soak.report import Report
from tests.soak.sampler import Sampler

log = logging.getLogger("soak")

RESULTS = ROOT / ".local" / "soak-results"
CHART_VENV = ROOT / ".local" / "bench-venv"
CAPACITY_IN_FLIGHT = 48
"""Enough in flight that the machine, not one workflow's latency (approvals, a report's
sources stage), bounds the rate."""
REPORT_EVERY_S = 300.0


def config() -> DeploymentConfig:
    return DeploymentConfig(
        "soak",
        KafkaCluster("reliability3", nodes=3, port_base=19192),
        PostgresServer.private(),
        isolated=SERVICES,
        database_proxy=True,
    )


async def measure_capacity(dep: Deployment, seconds: float) -> float:
    """Workflows settled per second by a closed loop of CAPACITY_IN_FLIGHT clients, the three
    reference workflows in turn, no faults: what this machine sustains with this deployment."""
    driver = dep.driver
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    settled = 0
    turn = iter(range(10**9))

    async def client() -> None:
        nonlocal settled
        while loop.time() < deadline:
            kind = KINDS[next(turn) % len(KINDS)]
            tracked = await driver.submit(kind, "soak-capacity")
            if await driver.wait_settled([tracked], 300.0) and loop.time() < deadline:
                settled += 1

    started = loop.time()
    await asyncio.gather(*(client() for _ in range(CAPACITY_IN_FLIGHT)))
    return settled / (loop.time() - started)


@contextlib.asynccontextmanager
async def open_loop(dep: Deployment, rate: float, failures: list[str]) -> AsyncIterator[None]:
    """Submissions at ``rate`` per second on a fixed schedule, the three reference workflows
    in turn, whatever the system's state: an outage piles them up (each retries through it
    with its Idempotency-Key, as a client would) instead of slowing the load down."""
    pending: set[asyncio.Task[Any]] = set()

    async def one(kind: Kind) -> None:
        try:
            await dep.driver.submit(kind, "soak")
        except Exception as exc:  # gave up after its retries: a violation of the run
            failures.append(f"a submission failed for good: {exc!r}"[:300])

    async def feed() -> None:
        start = time.monotonic()
        for i in itertools.count():
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            task = asyncio.create_task(one(KINDS[i % len(KINDS)]))
            pending.add(task)
            task.add_done_callback(pending.discard)

    feeding = asyncio.create_task(feed())
    try:
        yield
    finally:
        feeding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeding
        await asyncio.gather(*pending, return_exceptions=True)


async def run_faults(dep: Deployment, faults: FaultLog, slots: list[schedule.Slot], t0: float) -> None:
    for slot in slots:
        await asyncio.sleep(max(0.0, t0 + slot.at_s - time.monotonic()))
        log.info("faults at %.1f min: %s", slot.at_s / 60, "; ".join(f.describe() for f in slot.faults))
        await asyncio.gather(*(schedule.inject(dep, faults, f) for f in slot.faults))


def fault_rows(faults: FaultLog, t0: float) -> list[dict[str, Any]]:
    return [
        {
            "at_min": (f.started_at - t0) / 60,
            "kind": f.kind,
            "target": f.target,
            "detail": f.detail,
            "healed_s": f"{f.healed_at - f.started_at:.0f}" if f.healed_at else "-",
        }
        for f in faults.faults
    ]


def plot(out_dir: Path) -> list[str]:
    """The PNGs, drawn in the bench's tools venv (matplotlib); their names."""
    subprocess.run([str(ROOT / "bench" / "make-venv.sh")], check=True)
    done = subprocess.run(
        [str(CHART_VENV / "bin" / "python"), str(ROOT / "tests" / "soak" / "plots.py"), str(out_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.split()


async def soak(args: argparse.Namespace) -> int:
    out_dir = RESULTS / time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(out_dir)
    replay = f"make soak SOAK_MINUTES={args.minutes:g} SOAK_SEED={args.seed}"
    print(f"soak seed={args.seed} minutes={args.minutes:g} (replay: {replay})", flush=True)
    cfg = config()
    dep = Deployment(cfg, out_dir)
    passed = False
    try:
        await dep.start_infrastructure()
        await dep.start()
        capacity = await measure_capacity(dep, args.capacity_s)
        log.info("capacity %.2f workflows/s; load %.2f/s", capacity, capacity / 2)
        slots = schedule.draw(args.seed, args.minutes, list(SERVICES), cfg.kafka.nodes)
        meta = {
            "minutes": args.minutes,
            "seed": args.seed,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": f"{platform.node()}, {os.cpu_count()} cores, python {platform.python_version()}",
            "deployment": cfg.describe(),
            "capacity_per_s": capacity,
            "capacity_in_flight": CAPACITY_IN_FLIGHT,
            "capacity_s": args.capacity_s,
            "rate_per_s": capacity / 2,
            "schedule": [[f.describe() for f in s.faults] for s in slots],
        }
        run = Run(dep, Report(out_dir, meta), slots, args)
        await run.load()
        passed = await run.judge(Path(args.publish) if args.publish else None)
    finally:
        try:
            await dep.stop(clean=passed)
        finally:
            await dep.stop_infrastructure()
    return 0 if passed else 1


class Run:
    """The load and the faults, then the verdict."""

    def __init__(
        self, dep: Deployment, report: Report, slots: list[schedule.Slot], args: argparse.Namespace
    ) -> None:
        self.dep, self.report, self.slots, self.args = dep, report, slots, args
        self.faults = FaultLog()
        self.failed_submissions: list[str] = []
        self.t0 = time.monotonic()
        private = dep.config.postgres.private_dir
        self.sampler = Sampler(dep, self.t0, private / "postgres" / "data" if private else None)

    async def load(self) -> None:
        """Half the capacity, the schedule's faults, a sample every ``sample_s``, a report
        every five minutes."""
        dep, t0 = self.dep, self.t0
        injecting = asyncio.create_task(run_faults(dep, self.faults, self.slots, t0))
        next_report = REPORT_EVERY_S
        async with open_loop(dep, self.report.meta["rate_per_s"], self.failed_submissions):
            while (elapsed := time.monotonic() - t0) < self.args.minutes * 60:
                s = await self.sampler.sample()
                if elapsed >= next_report:
                    next_report += REPORT_EVERY_S
                    self.report.fault_rows = fault_rows(self.faults, t0)
                    self.report.write(self.sampler.samples, dep.driver.of("soak"), t0)
                    log.info(
                        "%.0f min: started %d settled %d lag %d outbox %d faults %d",
                        elapsed / 60,
                        s.started,
                        s.settled,
                        sum(s.lag.values()),
                        sum(s.outbox.values()),
                        self.faults.total,
                    )
                await asyncio.sleep(self.args.sample_s)
        await injecting  # the schedule ends two minutes before the load does

    async def judge(self, publish_to: Path | None) -> bool:
        dep, faults, sampler = self.dep, self.faults, self.sampler
        recon = await reconcile(dep, "soak", faults, deadline_s=600.0)
        capacity_recon = await reconcile(dep, "soak-capacity", FaultLog(), deadline_s=120.0)
        await sampler.sample()
        doubles = sum(len(s.faults) > 1 for s in self.slots)
        partitions = faults.by_kind().get("partition", 0)
        soaked = dep.driver.of("soak")
        final = {
            "summary": (
                f"soak minutes={self.args.minutes:g} seed={self.args.seed} workflows={recon.workflows} "
                f"faults={faults.total} partitions={partitions} doubles={doubles} lost={len(recon.lost)} "
                f"duplicate_effects={recon.duplicate_effects} stuck={len(recon.stuck)}"
            ),
            "faults": faults.total,
            "by_kind": faults.by_kind(),
            "doubles": doubles,
            "partitions": partitions,
            "started": len(soaked),
            "settled": sum(1 for w in soaked if w.settled),
            "max_recovery_s": f"{recon.max_recovery_s:.0f}s" if recon.max_recovery_s is not None else "-",
            "violations": [*recon.violations, *capacity_recon.violations, *self.failed_submissions],
            "notes": recon.notes,
        }
        self.report.fault_rows = fault_rows(faults, self.t0)
        self.report.write(sampler.samples, soaked, self.t0, final)
        verdict = self.report.write(sampler.samples, soaked, self.t0, final, plot(self.report.out_dir))
        if publish_to is not None:
            publish(self.report.out_dir, publish_to)
        for v in verdict.violations[:40]:
            print(f"violation: {v}")
        print(f"report: {self.report.out_dir / 'report.md'}")
        print(verdict.summary, flush=True)
        return not verdict.violations


def publish(out_dir: Path, dest: Path) -> None:
    """The report and its plots as the latest result (docs/soak/), replacing the last."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for path in out_dir.iterdir():
        if path.suffix in (".md", ".png") or path.name == "samples.json":
            shutil.copy2(path, dest / path.name)


def setup_logging(out_dir: Path) -> None:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for handler in (logging.FileHandler(out_dir / "run.log"), logging.StreamHandler(sys.stderr)):
        handler.setFormatter(fmt)
        root.addHandler(handler)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the load and faults run")
    parser.add_argument("--seed", type=int, default=None, help="the fault schedule's seed (default: random)")
    parser.add_argument("--capacity-s", type=float, default=120.0, help="how long capacity is measured")
    parser.add_argument("--sample-s", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--publish", default="", help="copy the report and plots to this directory")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "big")
    return asyncio.run(soak(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
