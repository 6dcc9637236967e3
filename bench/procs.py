"""The processes a run starts: steerable workers (JSON lines over stdin) and plain services.

Every failure says which process failed and shows the tail of its log, so an
infrastructure problem never turns into a silent zero in the results.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx

from chorus.tools.declarations import service_module
from tests.support.processes import ROOT, free_port


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class WorkerError(RuntimeError):
    pass


class Worker:
    """A child process answering one JSON line per command (bench.worker, bench/dbos/worker.py)."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log_dir: Path, cwd: Path = ROOT
    ) -> None:
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
        self.log_path = log_dir / f"{name}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.hello: dict[str, Any] = {}

    @property
    def pid(self) -> int:
        """The measured Python process (not a py-spy parent)."""
        return int(self.hello["pid"])

    async def start(self, timeout_s: float = 120.0) -> dict[str, Any]:
        log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            cwd=self.cwd,
            env=self.env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            limit=2**24,
        )
        self.hello = await self._read(timeout_s)
        return self.hello

    async def _read(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            try:
                line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
            except asyncio.TimeoutError:
                raise WorkerError(
                    f"{self.name}: no answer within {timeout_s}s\n{tail(self.log_path)}"
                ) from None
            if not line:
                code = await self.proc.wait()
                raise WorkerError(f"{self.name} exited ({code}):\n{tail(self.log_path)}")
            if not line.startswith(b"{"):
                continue  # py-spy's own banner shares stdout with the child
            reply: dict[str, Any] = json.loads(line)
            if not reply.get("ok"):
                raise WorkerError(f"{self.name}: {reply.get('error')}\n{tail(self.log_path)}")
            return reply

    async def call(self, op: str, timeout_s: float = 120.0, **args: Any) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        await self.proc.stdin.drain()
        return await self._read(timeout_s)

    async def stop(self, timeout_s: float = 60.0) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            await self.call("stop", timeout_s)
            await asyncio.wait_for(self.proc.wait(), timeout_s)
        except (WorkerError, asyncio.TimeoutError, BrokenPipeError, ConnectionResetError):
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


def profiled_worker(
    name: str, kind: str, spy: Path, fmt: str, output: Path, env: dict[str, str], log_dir: Path
) -> Worker:
    """A bench worker run under ``py-spy record`` (which may trace its own child; attaching
    to a running process is refused here), writing ``fmt`` (raw, flamegraph) to ``output``."""
    return Worker(
        name,
        [
            *(str(spy), "record", "-r", "250", "-f", fmt, "-o", str(output), "--"),
            *(sys.executable, "-m", "bench.worker", kind),
        ],
        env,
        log_dir,
    )


def bench_worker(name: str, kind: str, env: dict[str, str], log_dir: Path, tree: Path = ROOT) -> Worker:
    """``python -m bench.worker`` of ``tree`` (its bench and services packages)."""
    return Worker(name, [sys.executable, "-m", "bench.worker", kind], env, log_dir, cwd=tree)


class ServiceProc:
    """A real service (by name) as ``python -m <its package>``, healthy when /health answers 200."""

    def __init__(self, module: str, env: dict[str, str], log_dir: Path) -> None:
        self.module = module
        self.port = free_port()
        self.env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            **env,
            "CHORUS_HTTP_PORT": str(self.port),  # the health probe needs to know it
        }
        self.log_path = log_dir / f"{module}.log"
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, timeout_s: float = 120.0) -> None:
        log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            service_module(self.module),
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while loop.time() < deadline:
                if self.proc.returncode is not None:
                    raise WorkerError(
                        f"{self.module} exited ({self.proc.returncode}):\n{tail(self.log_path)}"
                    )
                try:
                    response = await client.get(f"http://127.0.0.1:{self.port}/health")
                    if response.status_code == 200 and response.json()["assigned_partitions"]:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise WorkerError(f"{self.module} not healthy after {timeout_s}s:\n{tail(self.log_path)}")

    def check_alive(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            raise WorkerError(f"{self.module} died:\n{tail(self.log_path)}")

    async def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (graceful: flush the outbox, commit offsets), SIGKILL after the timeout."""
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout_s)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
