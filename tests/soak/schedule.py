"""The soak's faults: what may break, drawn at random from a seed, one or two at a time.

A schedule is drawn whole before the run starts, so the seed printed at the start
replays it exactly (``make soak SOAK_SEED=<seed>``). Each fault breaks one thing for a
while and heals it, as the reliability suite's injectors do, and records itself in the
run's :class:`FaultLog`.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tests.reliability import injectors
from tests.reliability.deployment import DATABASE_PROXY, Deployment, Fault, FaultLog

KINDS = (
    "sigkill",
    "sigstop",
    "broker-kill",
    "postgres-restart",
    "partition",
    "latency",
    "loss",
    "clock-skew",
)
WEIGHTS = (3, 2, 1, 1, 3, 1, 1, 1)
"""Partitions and process deaths are the most common production faults; the broker and
the database going away the least."""
MIN_PARTITIONS = 5
MIN_DOUBLES = 3


@dataclass(frozen=True)
class Planned:
    """One fault of the schedule: ``kind`` on ``target`` for ``hold_s``."""

    kind: str
    target: str
    hold_s: float
    detail: str = ""

    def describe(self) -> str:
        extra = f" {self.detail}" if self.detail else ""
        return f"{self.kind} {self.target}{extra} ({self.hold_s:.0f}s)"


@dataclass(frozen=True)
class Slot:
    at_s: float
    """Seconds after the faults begin."""
    faults: tuple[Planned, ...]


def draw(seed: int, minutes: float, services: list[str], brokers: int) -> list[Slot]:
    """A fault every 1 to 3 minutes; a quarter of the slots break two things at once.
    At least :data:`MIN_PARTITIONS` partitions and :data:`MIN_DOUBLES` double faults
    when the run is long enough for them (a slot is turned into one, by the same seed)."""
    rng = random.Random(seed)
    slots: list[Slot] = []
    at = rng.uniform(60, 180)
    while at < minutes * 60 - 120:  # the last two minutes recover, fault-free
        count = 2 if rng.random() < 0.25 else 1
        slots.append(Slot(at, tuple(_one(rng, services, brokers) for _ in range(count))))
        at += rng.uniform(60, 180)
    order = list(range(len(slots)))
    rng.shuffle(order)
    for i in order:
        if sum(len(s.faults) > 1 for s in slots) >= MIN_DOUBLES:
            break
        if len(slots[i].faults) == 1:
            slots[i] = Slot(slots[i].at_s, (*slots[i].faults, _one(rng, services, brokers)))
    for i in order:
        if sum(f.kind == "partition" for s in slots for f in s.faults) >= MIN_PARTITIONS:
            break
        if all(f.kind != "partition" for f in slots[i].faults):
            slots[i] = Slot(slots[i].at_s, (_one(rng, services, brokers, "partition"), *slots[i].faults[1:]))
    return slots


def _one(rng: random.Random, services: list[str], brokers: int, kind: str | None = None) -> Planned:
    kind = kind or rng.choices(KINDS, WEIGHTS)[0]
    service = rng.choice(services)
    if kind == "sigkill":
        return Planned(kind, service, rng.uniform(1, 5), "restarted after")
    if kind == "sigstop":
        return Planned(kind, service, rng.uniform(10, 40))
    if kind == "broker-kill":
        return Planned(kind, f"broker {rng.randint(1, brokers)}", rng.uniform(10, 30))
    if kind == "postgres-restart":
        return Planned(kind, "postgres", 0.0)
    if kind == "partition":
        return Planned(kind, service, rng.uniform(20, 60), rng.choice(("from kafka", "from database")))
    if kind == "latency":
        return Planned(kind, "database", rng.uniform(30, 90), f"+{rng.choice((100, 200, 300))} ms")
    if kind == "loss":
        return Planned(kind, service, rng.uniform(30, 90), f"{rng.choice((5, 10, 20))}%")
    return Planned(kind, service, rng.uniform(60, 120), f"{rng.choice((-90, -30, 30, 90)):+d}s")


Injector = Callable[[Deployment, FaultLog, Planned], Awaitable[None]]


async def inject(dep: Deployment, faults: FaultLog, planned: Planned) -> None:
    """Break what ``planned`` names, hold, heal. Never raises for a fault that could not be
    injected: that is a problem in the log (a soak that broke nothing must not pass)."""
    try:
        await INJECTORS[planned.kind](dep, faults, planned)
    except Exception as exc:  # a harness failure, reported with the run
        faults.problems.append(f"{planned.describe()}: could not be injected: {exc!r}")


async def _sigkill(dep: Deployment, faults: FaultLog, planned: Planned) -> None:
    proc = dep.proc(planned.target)
    if proc.popen is None or not proc.running:
        faults.problems.append(f"sigkill: {planned.target} was not running")
        return
    fault = faults.add("sigkill", planned.target, "SIGKILL, then restarted as a supervisor would")
    dep.stopped_on_purpose.add(planned.target)
    proc.popen.send_signal(signal.SIGKILL)
    await asyncio.sleep(planned.hold_s)
    await dep.start_proc(planned.target)
    fault.healed_at = time.monotonic()


async def _sigstop(dep: Deployment, faults: FaultLog, planned: Planned) -> None:
    proc = dep.proc(planned.target)
    if proc.popen is None or not proc.running:
        faults.problems.append(f"sigstop: {planned.target} was not running")
        return
    pid = proc.popen.pid
    fault = faults.add("sigstop", planned.target, f"paused {planned.hold_s:.0f}s")
    os.kill(pid, signal.SIGSTOP)

    async def wake() -> None:
        os.kill(pid, signal.SIGCONT)

    await _hold(fault, planned.hold_s, wake)


async def _broker_kill(dep: Deployment, faults: FaultLog, planned: Planned) -> None:
    kafka = dep.config.kafka
    node = int(planned.target.rsplit(" ", 1)[1])
    fault = faults.add("broker-kill", f"{kafka.label} node {node}", f"SIGKILL, down {planned.hold_s:.0f}s")
    kafka.kill_node(node)
    await kafka.wait_node_gone(node)
    await asyncio.sleep(planned.hold_s)
    await kafka.start()
    fault.healed_at = time.monotonic()


async def _postgres_restart(dep: Deployment, faults: FaultLog, planned: Planned) -> None:
    await injectors.restart_postgres(dep, faults)


async def _partition(dep: Deployment, faults: FaultLog, planned: Planned) -> None:
    node = dep.node(planned.target)
    target = planned.detail.removeprefix("from ")
    ports = dep.kafka_ports() if target == "kafka" else [dep.database_port()]
    await node.partition(ports, target)
    fault = faults.add("partition", planned.target, f"{planned.detail}, {planned.hold_s:.0f}s")
    await _hold(fault, planned.hold_s, node.heal)


async def _latency(dep: Deployment, faults: FaultLog, planned: Planned) -> None:
    assert dep.lab is not None and dep.lab.toxiproxy is not None
    toxiproxy = dep.lab.toxiproxy
    fault = faults.add("latency", "database", f"{planned.detail} on every answer, {planned.hold_s:.0f}s")
    await toxiproxy.latency(DATABASE_PROXY, int(planned.detail.strip("+ ms")), direction="downstream")

    async def clear() -> None:
        await toxiproxy.clear(DATABASE_PROXY)

    await _hold(fault, planned.hold_s, clear)


async def _loss(dep: Deployment, faults: FaultLog, planned: Planned) -> None:
    node = dep.node(planned.target)
    await node.lose(int(planned.detail.rstrip("%")))
    fault = faults.add("loss", planned.target, f"{planned.detail} of its packets, {planned.hold_s:.0f}s")
    await _hold(fault, planned.hold_s, node.heal)


async def _clock_skew(dep: Deployment, faults: FaultLog, planned: Planned) -> None:
    """The service restarted on a clock of its own, ``detail`` off everyone else's (an NTP
    gone wrong), then restarted on the shared one."""
    skew = float(planned.detail.rstrip("s"))
    skewed = dep.workdir / f"clock-skew-{planned.target}"
    shared = float(dep.clock_file.read_text().strip() or 0) if dep.clock_file.exists() else 0.0
    skewed.write_text(str(shared + skew))
    fault = faults.add("clock-skew", planned.target, f"{planned.detail} for {planned.hold_s:.0f}s")
    await dep.terminate(planned.target)
    await dep.start_proc(planned.target, {"CHORUS_CLOCK": f"offset-file:{skewed}"})

    async def restore() -> None:
        await dep.terminate(planned.target)
        await dep.start_proc(planned.target)

    await _hold(fault, planned.hold_s, restore)


async def _hold(fault: Fault, hold_s: float, heal: Callable[[], Awaitable[None]]) -> None:
    """Leave it broken for ``hold_s``, heal it (whatever happens), note when it was whole."""
    try:
        await asyncio.sleep(hold_s)
    finally:
        await heal()
    fault.healed_at = time.monotonic()


INJECTORS: dict[str, Injector] = {
    "sigkill": _sigkill,
    "sigstop": _sigstop,
    "broker-kill": _broker_kill,
    "postgres-restart": _postgres_restart,
    "partition": _partition,
    "latency": _latency,
    "loss": _loss,
    "clock-skew": _clock_skew,
}
