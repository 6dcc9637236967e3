"""The dispatcher: one record at a time per workflow, weighted preference across lanes."""

from __future__ import annotations

import asyncio

from chorus.kernel.lanes import Dispatcher, Work
from chorus.kernel.records import Record


def rec(key: str, offset: int) -> Record:
    return Record(topic="t", partition=0, offset=offset, key=key.encode(), value=b"{}")


async def test_records_of_one_workflow_run_in_order_and_never_together() -> None:
    running: set[str] = set()
    seen: list[tuple[str, int]] = []

    async def process(r: Record) -> None:
        key = r.workflow_key
        assert key not in running, "two records of one workflow ran at once"
        running.add(key)
        await asyncio.sleep(0.001 * (r.offset % 3))
        seen.append((key, r.offset))
        running.discard(key)

    dispatcher = Dispatcher(process, concurrency=4)
    for i in range(60):
        dispatcher.submit(Work(rec(f"wf{i % 5}", i), "normal", on_done=lambda: None))
    assert await dispatcher.wait_idle(10)
    for k in range(5):
        offsets = [o for key, o in seen if key == f"wf{k}"]
        assert offsets == sorted(offsets) and len(offsets) == 12


async def test_high_priority_is_preferred_without_starving_low() -> None:
    order: list[str] = []

    async def process(r: Record) -> None:
        order.append(r.topic)
        await asyncio.sleep(0)

    dispatcher = Dispatcher(process, concurrency=1, weights={"high": 6, "normal": 3, "low": 1})
    gate = asyncio.Event()

    # Occupy the only slot so that everything below queues up first.
    dispatcher.run_exclusive("block", gate.wait)
    for i in range(50):
        dispatcher.submit(Work(Record("low", 0, i, f"l{i}".encode(), b""), "low", on_done=lambda: None))
    for i in range(12):
        dispatcher.submit(Work(Record("high", 0, i, f"h{i}".encode(), b""), "high", on_done=lambda: None))
    gate.set()
    assert await dispatcher.wait_idle(10)
    first_twenty = order[:14]
    assert first_twenty.count("high") == 12  # high drained first: 12 of the first 14 picks
    assert "low" in first_twenty  # but low still moved while high waited


async def test_an_infrastructure_failure_retries_the_same_record() -> None:
    attempts = 0
    done: list[int] = []

    async def process(r: Record) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise ConnectionError("database restarting")

    dispatcher = Dispatcher(process, concurrency=1, infra_retry_s=0.01)
    dispatcher.submit(Work(rec("wf", 1), "normal", on_done=lambda: done.append(1)))
    assert await dispatcher.wait_idle(5)
    assert attempts == 3 and done == [1]
