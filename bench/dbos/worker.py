"""R5 baseline: the same 5-step workflow as bench_flow, on DBOS Transact and the same PostgreSQL.

Each step is a DBOS transaction (the state change and DBOS's record of the step's
output commit together), like a Chorus step (checkpoint + inbox + outbox in one
transaction). Runs in its own venv; steered by JSON lines on stdin like bench.worker:

  {"op": "throughput", "workflows": W}  start W workflows at once, wait for all
  {"op": "latency", "workflows": M}     M workflows one after another
  {"op": "stop"}

Environment: DBOS_SYSTEM_URL (DBOS's system database), DBOS_APP_URL (the steps' table).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from typing import Any

from dbos import DBOS, AsyncSQLAlchemyDatasource, DBOSConfig, SQLAlchemyDatasource
from sqlalchemy import text

STEPS = 5
PAD = "x" * 512


class Bound:
    """Datasources and the transaction-decorated steps, bound once at start (DBOS needs
    the datasource object before it can decorate a transaction)."""

    ds: AsyncSQLAlchemyDatasource | None = None
    sync_ds: SQLAlchemyDatasource | None = None
    step_tx: Any = None
    step_tx_sync: Any = None


async def _step(workflow_id: str, step: int) -> int:
    assert Bound.ds is not None
    await Bound.ds.sql_session().execute(
        text(
            """INSERT INTO bench_flow_state (workflow_id, step, updated_at)
               VALUES (:w, :s, now())
               ON CONFLICT (workflow_id) DO UPDATE SET step = :s, updated_at = now()"""
        ),
        {"w": workflow_id, "s": step},
    )
    return step


def _step_sync(workflow_id: str, step: int) -> int:
    assert Bound.sync_ds is not None
    Bound.sync_ds.sql_session().execute(
        text(
            """INSERT INTO bench_flow_state (workflow_id, step, updated_at)
               VALUES (:w, :s, now())
               ON CONFLICT (workflow_id) DO UPDATE SET step = :s, updated_at = now()"""
        ),
        {"w": workflow_id, "s": step},
    )
    return step


# Threads (sync) measured faster than asyncio here (21 vs 11 workflows/s), so sync is the default.
MODE = os.environ.get("DBOS_MODE", "sync")


@DBOS.workflow()
async def flow(pad: str) -> int:
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None
    done = 0
    for step in range(1, STEPS + 1):
        done = await Bound.step_tx(workflow_id, step)
    return done


@DBOS.workflow()
def flow_sync(pad: str) -> int:
    workflow_id = DBOS.workflow_id
    assert workflow_id is not None
    done = 0
    for step in range(1, STEPS + 1):
        done = Bound.step_tx_sync(workflow_id, step)
    return done


def _run_one_sync() -> float:
    started = time.perf_counter()
    result = DBOS.start_workflow(flow_sync, PAD).get_result()
    if result != STEPS:
        raise RuntimeError(f"workflow ended at step {result}")
    return (time.perf_counter() - started) * 1000


async def _run_one() -> float:
    if MODE == "sync":
        return _run_one_sync()
    started = time.perf_counter()
    handle = await DBOS.start_workflow_async(flow, PAD)
    result = await handle.get_result()
    if result != STEPS:
        raise RuntimeError(f"workflow ended at step {result}")
    return (time.perf_counter() - started) * 1000


async def throughput(workflows: int) -> dict[str, Any]:
    started = time.perf_counter()
    if MODE == "sync":
        sync_handles = [DBOS.start_workflow(flow_sync, PAD) for _ in range(workflows)]
        results = [h.get_result() for h in sync_handles]
    else:
        handles = [await DBOS.start_workflow_async(flow, PAD) for _ in range(workflows)]
        results = await asyncio.gather(*(h.get_result() for h in handles))
    elapsed = time.perf_counter() - started
    if any(r != STEPS for r in results):
        raise RuntimeError("a workflow did not finish its steps")
    return {"elapsed_s": elapsed, "workflows": workflows}


async def latency(workflows: int) -> dict[str, Any]:
    return {"latencies_ms": [await _run_one() for _ in range(workflows)]}


async def closed(workflows: int, in_flight: int) -> dict[str, Any]:
    """A client's closed loop: ``in_flight`` workflows running, each end starts the next."""
    remaining = iter(range(workflows))
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    # get_result blocks: in sync mode each client is a thread, as a sync app's would be.
    threads = ThreadPoolExecutor(max_workers=in_flight)

    async def client() -> None:
        for _ in remaining:
            if MODE == "sync":
                latencies.append(await loop.run_in_executor(threads, _run_one_sync))
            else:
                latencies.append(await _run_one())

    started = time.perf_counter()
    try:
        await asyncio.gather(*(client() for _ in range(in_flight)))
    finally:
        threads.shutdown()
    return {"elapsed_s": time.perf_counter() - started, "latencies_ms": latencies}


async def main() -> None:
    config: DBOSConfig = {
        "name": "chorus_bench",
        "system_database_url": os.environ["DBOS_SYSTEM_URL"],
        "log_level": "WARNING",
    }
    DBOS(config=config)
    Bound.ds = await AsyncSQLAlchemyDatasource.create(os.environ["DBOS_APP_URL"])
    # READ COMMITTED like Chorus's transactions (DBOS defaults to SERIALIZABLE).
    Bound.step_tx = Bound.ds.transaction(isolation_level="READ COMMITTED")(_step)
    Bound.sync_ds = SQLAlchemyDatasource.create(os.environ["DBOS_APP_URL"])
    Bound.step_tx_sync = Bound.sync_ds.transaction(isolation_level="READ COMMITTED")(_step_sync)
    async with Bound.ds.engine.begin() as conn:
        await conn.execute(
            text(
                """CREATE TABLE IF NOT EXISTS bench_flow_state (
                     workflow_id text PRIMARY KEY, step int NOT NULL,
                     updated_at timestamptz NOT NULL)"""
            )
        )
    DBOS.launch()
    hello = {
        "ok": True,
        "op": "started",
        "pid": os.getpid(),
        "mode": MODE,
        "versions": {p: version(p) for p in ("dbos", "sqlalchemy", "psycopg")},
    }
    print(json.dumps(hello), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := await reader.readline():
            cmd = json.loads(line)
            try:
                if cmd["op"] == "throughput":
                    reply = await throughput(int(cmd["workflows"]))
                elif cmd["op"] == "latency":
                    reply = await latency(int(cmd["workflows"]))
                elif cmd["op"] == "closed":
                    reply = await closed(int(cmd["workflows"]), int(cmd["in_flight"]))
                elif cmd["op"] == "stop":
                    print(json.dumps({"ok": True, "op": "stop"}), flush=True)
                    break
                else:
                    raise ValueError(f"unknown op {cmd['op']!r}")
                reply.update(ok=True, op=cmd["op"])
            except Exception as exc:
                reply = {"ok": False, "op": cmd.get("op"), "error": repr(exc)}
            print(json.dumps(reply), flush=True)
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    asyncio.run(main())
