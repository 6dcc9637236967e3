"""Bounded concurrency with per-workflow order and weighted priority lanes.

- At most ``concurrency`` records are handled at once, so a long LLM call ties up
  one slot, not the partition.
- Records with the same key (workflow id) run one after another, in arrival order
  (unless ``per_workflow_order`` is off: a stateless worker's records each run at once).
- When slots are scarce, waiting work is picked by weighted round robin over
  the high / normal / low lanes (default 6:3:1), so a burst of low-priority work
  cannot starve high-priority work, and low still moves.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from chorus.kernel.records import Record
from chorus.kernel.stuck import StuckRecords

log = logging.getLogger("chorus.dispatch")

PRIORITIES = ("high", "normal", "low")
DEFAULT_WEIGHTS = {"high": 6, "normal": 3, "low": 1}


@dataclass
class Work:
    record: Record
    priority: str
    on_done: Callable[[], None]
    cancelled: bool = False
    key: str = field(init=False)

    def __post_init__(self) -> None:
        self.key = self.record.workflow_key


class Dispatcher:
    def __init__(
        self,
        process: Callable[[Record], Awaitable[None]],
        *,
        concurrency: int = 32,
        weights: dict[str, int] | None = None,
        infra_retry_s: float = 0.5,
        infra_retry_max_s: float = 10.0,
        on_fatal: Callable[[BaseException], None] | None = None,
        stuck: StuckRecords | None = None,
        per_workflow_order: bool = True,
    ) -> None:
        self._process = process
        self._ordered = per_workflow_order
        self.concurrency = concurrency
        self.weights = weights or DEFAULT_WEIGHTS
        self._credits = dict(self.weights)
        self._pending: dict[str, deque[Work]] = {p: deque() for p in PRIORITIES}
        self._backlog: dict[str, deque[Work]] = {}
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._infra_retry_s = infra_retry_s
        self._infra_retry_max_s = infra_retry_max_s
        self._on_fatal = on_fatal
        self.stuck = stuck or StuckRecords(alert_after_s=180.0)
        self._idle = asyncio.Event()
        self._idle.set()
        self.closed = False

    # -- public ------------------------------------------------------------------------

    def submit(self, work: Work) -> None:
        if not self._ordered and work.record.offset >= 0:
            work.key = f"{work.key}@{work.record.topic}/{work.record.partition}/{work.record.offset}"
        self._pending[work.priority if work.priority in self._pending else "normal"].append(work)
        self._idle.clear()
        self._pump()

    @property
    def in_flight(self) -> int:
        return len(self._busy)

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._pending.values()) + sum(len(q) for q in self._backlog.values())

    async def wait_idle(self, limit_s: float | None = None) -> bool:
        """True once nothing runs or waits; False when ``limit_s`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), limit_s)
            return True
        except asyncio.TimeoutError:
            return False

    def run_exclusive(self, key: str, job: Callable[[], Awaitable[object]]) -> None:
        """Run ``job`` in ``key``'s lane (after its queued records), e.g. a parked-event drain."""
        record = Record(topic="", partition=-1, offset=-1, key=key.encode(), value=None)
        work = Work(record, "normal", on_done=lambda: None)
        work.job = job  # type: ignore[attr-defined]
        self.submit(work)

    async def close(self) -> None:
        """Stop starting work and cancel what runs (shutdown after the grace period)."""
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- internals ----------------------------------------------------------------------

    def _pick(self) -> Work | None:
        for _ in range(2):
            for priority in PRIORITIES:
                queue = self._pending[priority]
                if queue and self._credits[priority] > 0:
                    self._credits[priority] -= 1
                    return queue.popleft()
            self._credits = dict(self.weights)  # every lane with work spent its share
        return None

    def _pump(self) -> None:
        while not self.closed and len(self._busy) < self.concurrency:
            work = self._pick()
            if work is None:
                break
            if work.cancelled:
                continue
            if work.key in self._busy:
                self._backlog.setdefault(work.key, deque()).append(work)
                continue
            self._start(work)
        if not self._busy and not self.queued:
            self._idle.set()

    def _start(self, work: Work) -> None:
        self._busy.add(work.key)
        task = asyncio.create_task(self._run_lane(work), name=f"lane:{work.key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_lane(self, work: Work) -> None:
        key = work.key
        try:
            current: Work | None = work
            while current is not None:
                if not current.cancelled:
                    await self._run_one(current)
                backlog = self._backlog.get(key)
                current = backlog.popleft() if backlog else None
                if backlog is not None and not backlog:
                    self._backlog.pop(key, None)
        finally:
            self._busy.discard(key)
            self._pump()

    async def _run_one(self, work: Work) -> None:
        try:
            await self._run_until_committed(work)
        finally:
            self.stuck.finished(work.record)

    async def _run_until_committed(self, work: Work) -> None:
        delay = self._infra_retry_s
        while not self.closed and not work.cancelled:
            try:
                job = getattr(work, "job", None)
                if job is not None:
                    await job()
                else:
                    await self._process(work.record)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._on_fatal is not None and getattr(exc, "fatal", False):
                    self._on_fatal(exc)
                    return
                # Infrastructure failed (database down, broker away): nothing was
                # committed, so the same record is tried again; the lane waits, and
                # past the stuck-record budget it says so (chorus.kernel.stuck).
                log.warning(
                    "record could not be processed (%r); retrying in %.1fs",
                    exc,
                    delay,
                )
                self.stuck.failed(work.record, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._infra_retry_max_s)
                continue
            work.on_done()
            return
