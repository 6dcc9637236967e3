"""R5 baseline: the same 5-step workflow as bench_flow, on Restate and the same PostgreSQL.

The workflow is a Restate ``Workflow`` (one keyed ``run`` per workflow id, as DBOS's
workflows and Chorus's have ids), served by the Python SDK under hypercorn. Each step is a
durable ``ctx.run`` doing the state change of bench/dbos/worker.py in PostgreSQL (one
INSERT ... ON CONFLICT UPDATE, autocommit, READ COMMITTED); Restate then records the step's
result in its own log (restate-server, RocksDB on local disk) before the next step starts. A
step is at-least-once in Restate (a crash between the commit and the journal entry runs it
again); the upsert makes that harmless, as Chorus's inbox and DBOS's transaction do.

Three processes, all stopped on ``stop`` and on any exit of this one:

- this one: the client, steered by JSON lines on stdin like bench/dbos/worker.py;
- ``worker.py serve PORT``: the SDK endpoint (HTTP/2 cleartext, Restate's streaming protocol);
- restate-server (the pinned binary, bench/restate/fetch_server.py) with its defaults, except
  its addresses (free ports on 127.0.0.1), its data directory (a new one under
  .local/bench-restate/runs, removed on stop) and telemetry (off: no network here). It
  still asks GitHub for its latest release once at start (no setting turns that off); here
  that fails at once and changes nothing.

Its defaults are durable: the log (replicated loglet, one copy on this node) is written with
the RocksDB WAL fsync'd (``rocksdb-disable-wal-fsync = false``) before an append is
acknowledged, so a step's journal entry and the workflow's output are on disk before the
next step runs and before the ingress answers.

Commands (one JSON reply each):

  {"op": "throughput", "workflows": W}            W workflows at once, wait for all
  {"op": "latency", "workflows": M}               M workflows one after another
  {"op": "closed", "workflows": W, "in_flight": N}  N clients, each end starts the next
  {"op": "stop"}

A workflow is timed as its client sees it: one HTTP call to the ingress
(``POST /BenchFlow/<id>/run``), which answers when the workflow has ended. The client is one
aiohttp session for the whole run (HTTP/1.1 keep-alive, no connection limit): aiohttp is
the leanest asyncio HTTP client on CPU (this process used ~0.7 ms of CPU per workflow,
against ~4 ms each for the server and the endpoint), and reusing connections keeps
connection setup out of every measurement, so the baseline pays for its workflows only.

Environment: RESTATE_SERVER_BIN (the server binary), RESTATE_APP_URL (the steps' database),
RESTATE_WORK_DIR (where run directories go).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import restate
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig
from restate.server import install_shutdown_hook

STEPS = 5
PAD = "x" * 512
WORKFLOW = "BenchFlow"
UPSERT = """INSERT INTO bench_flow_state (workflow_id, step, updated_at)
            VALUES ($1, $2, now())
            ON CONFLICT (workflow_id) DO UPDATE SET step = $2, updated_at = now()"""
POOL_SIZE = 10  # Chorus's db_pool_size (ServiceSettings)

# -- the workflow (the endpoint process) -------------------------------------------------------

flow = restate.Workflow(WORKFLOW)


class Db:
    pool: asyncpg.Pool | None = None


async def _step(workflow_id: str, step: int) -> int:
    assert Db.pool is not None
    await Db.pool.execute(UPSERT, workflow_id, step)
    return step


@flow.main()
async def run(ctx: restate.WorkflowContext, pad: str) -> int:
    workflow_id = ctx.key()
    done = 0
    for step in range(1, STEPS + 1):
        done = await ctx.run_typed(f"step-{step}", _step, restate.RunOptions(), workflow_id, step)
    return done


async def serve_endpoint(port: int) -> None:
    """The SDK endpoint on 127.0.0.1:``port`` until SIGTERM (the SDK's own hook chains ours)."""
    Db.pool = await asyncpg.create_pool(os.environ["RESTATE_APP_URL"], min_size=1, max_size=POOL_SIZE)
    config = HypercornConfig()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    stopping = asyncio.Event()
    install_shutdown_hook(asyncio.get_running_loop(), stopping.set)
    try:
        await hypercorn_serve(restate.app([flow]), config, shutdown_trigger=stopping.wait)
    finally:
        await Db.pool.close()


# -- restate-server and the endpoint as children of the client --------------------------------


def _die_with_parent(parent: int) -> None:
    """In the child before exec: SIGTERM when the client dies (also by SIGKILL), so no
    restate-server outlives a crashed run (Linux's PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Deployment:
    """restate-server and the SDK endpoint, in a run directory of their own."""

    work: Path
    ports: dict[str, int] = field(default_factory=dict)
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def ingress(self) -> str:
        return f"http://127.0.0.1:{self.ports['ingress']}"

    def spawn(self, argv: list[str]) -> subprocess.Popen[bytes]:
        parent = os.getpid()
        # stdout is the JSON channel to the driver: children log to stderr (the worker's log).
        # preexec_fn is safe here: no thread runs yet (see launch).
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr,
            preexec_fn=lambda: _die_with_parent(parent),  # noqa: PLW1509
        )
        self.children.append(child)
        return child

    def server_config(self) -> Path:
        """restate-server's defaults but for addresses, data directory and telemetry."""
        node, admin, ingress = self.ports["node"], self.ports["admin"], self.ports["ingress"]
        path = self.work / "restate.toml"
        path.write_text(
            f"""cluster-name = "chorus-bench"
node-name = "bench"
base-dir = "{self.work / "data"}"
disable-telemetry = true
log-format = "compact"
log-disable-ansi-codes = true
bind-address = "127.0.0.1:{node}"
advertised-address = "http://127.0.0.1:{node}/"

[admin]
bind-address = "127.0.0.1:{admin}"

[ingress]
bind-address = "127.0.0.1:{ingress}"
"""
        )
        return path

    def launch(self) -> None:
        """restate-server and the endpoint on free ports. Called before this process starts
        any thread (asyncpg's and aiohttp's resolvers may), so the preexec_fn is safe."""
        self.ports = {name: _free_port() for name in ("node", "admin", "ingress", "endpoint")}
        server = os.environ["RESTATE_SERVER_BIN"]
        self.spawn([server, "--config-file", str(self.server_config()), "--listen-mode", "tcp", "--no-logo"])
        self.spawn([sys.executable, __file__, "serve", str(self.ports["endpoint"])])

    async def register(self, session: aiohttp.ClientSession) -> None:
        """Once all three answer their health checks, the endpoint's services are registered."""
        admin = f"http://127.0.0.1:{self.ports['admin']}"
        await self._healthy(session, f"{admin}/health")
        await self._healthy(session, f"{self.ingress}/restate/health")
        await self._healthy(session, f"http://127.0.0.1:{self.ports['endpoint']}/health")
        # The server discovers the endpoint's services over HTTP/2 (prior knowledge).
        uri = f"http://127.0.0.1:{self.ports['endpoint']}/"
        async with session.post(f"{admin}/deployments", json={"uri": uri}) as response:
            if response.status >= 300:
                raise RuntimeError(f"registering {uri}: {response.status} {await response.text()}")

    async def _healthy(self, session: aiohttp.ClientSession, url: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for child in self.children:
                if child.poll() is not None:
                    raise RuntimeError(f"{child.args!r} exited ({child.returncode}) while starting")
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{url} not healthy after {timeout_s:.0f} s")

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (restate-server drains and flushes), SIGKILL after ``timeout_s``; the
        server first, so nothing is invoked on an endpoint that is going away."""
        for child in self.children:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        shutil.rmtree(self.work, ignore_errors=True)


# -- the client's measurements ---------------------------------------------------------------------


@dataclass
class Client:
    session: aiohttp.ClientSession
    ingress: str
    prefix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    count: int = 0

    async def one(self) -> float:
        """One workflow, start to end, as its client sees it (ms)."""
        self.count += 1
        url = f"{self.ingress}/{WORKFLOW}/wf-{self.prefix}-{self.count}/run"
        started = time.perf_counter()
        async with self.session.post(url, json=PAD) as response:
            body = await response.read()
            if response.status != 200 or json.loads(body) != STEPS:
                raise RuntimeError(f"{url}: {response.status} {body[:200]!r}")
        return (time.perf_counter() - started) * 1000

    async def first(self, timeout_s: float = 60.0) -> None:
        """The first workflow, retried while the ingress does not know the service yet."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await self.one()
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def throughput(self, workflows: int) -> dict[str, Any]:
        started = time.perf_counter()
        await asyncio.gather(*(self.one() for _ in range(workflows)))
        return {"elapsed_s": time.perf_counter() - started, "workflows": workflows}

    async def latency(self, workflows: int) -> dict[str, Any]:
        return {"latencies_ms": [await self.one() for _ in range(workflows)]}

    async def closed(self, workflows: int, in_flight: int) -> dict[str, Any]:
        remaining = iter(range(workflows))
        latencies: list[float] = []

        async def client() -> None:
            for _ in remaining:
                latencies.append(await self.one())

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(in_flight)))
        return {"elapsed_s": time.perf_counter() - started, "latencies_ms": latencies}


async def answer(client: Client, cmd: dict[str, Any]) -> dict[str, Any]:
    if cmd["op"] == "throughput":
        return await client.throughput(int(cmd["workflows"]))
    if cmd["op"] == "latency":
        return await client.latency(int(cmd["workflows"]))
    if cmd["op"] == "closed":
        return await client.closed(int(cmd["workflows"]), int(cmd["in_flight"]))
    raise ValueError(f"unknown op {cmd['op']!r}")


async def prepare_table() -> None:
    conn = await asyncpg.connect(os.environ["RESTATE_APP_URL"])
    try:
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS bench_flow_state (
                 workflow_id text PRIMARY KEY, step int NOT NULL, updated_at timestamptz NOT NULL)"""
        )
    finally:
        await conn.close()


def hello(deployment: Deployment) -> dict[str, Any]:
    server = os.environ["RESTATE_SERVER_BIN"]
    said = subprocess.run([server, "--version"], capture_output=True, text=True, check=True).stdout
    return {
        "ok": True,
        "op": "started",
        "pid": os.getpid(),
        "pids": [child.pid for child in deployment.children],
        "mode": "Workflow, ctx.run steps; endpoint HTTP/2 (hypercorn); client aiohttp HTTP/1.1 keep-alive",
        "versions": {
            "restate-server": said.split()[-1],
            **{p: version(p) for p in ("restate-sdk", "hypercorn", "asyncpg", "aiohttp")},
        },
    }


async def steer(client: Client) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        cmd = json.loads(line)
        if cmd["op"] == "stop":
            print(json.dumps({"ok": True, "op": "stop"}), flush=True)
            return
        try:
            reply = await answer(client, cmd)
            reply.update(ok=True, op=cmd["op"])
        except Exception as exc:
            reply = {"ok": False, "op": cmd.get("op"), "error": repr(exc)}
        print(json.dumps(reply), flush=True)


async def main() -> None:
    # SIGTERM ends the run through the finally below, like stop.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    runs = Path(os.environ["RESTATE_WORK_DIR"]) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    deployment = Deployment(Path(tempfile.mkdtemp(prefix="run-", dir=runs)))
    try:
        deployment.launch()
        await prepare_table()
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
        async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=300)
        ) as session:
            await deployment.register(session)
            client = Client(session, deployment.ingress)
            await client.first()
            print(json.dumps(hello(deployment)), flush=True)
            await steer(client)
    finally:
        deployment.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", nargs="?", choices=("client", "serve"), default="client")
    parser.add_argument("port", nargs="?", type=int)
    args = parser.parse_args()
    if args.role == "serve":
        asyncio.run(serve_endpoint(args.port))
    else:
        asyncio.run(main())
