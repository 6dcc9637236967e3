"""Services as separate OS processes, the way they run in production.

Each process gets its own environment (registry copy, HTTP port, faults), logs to
a file under the test's tmp dir, and is killed or terminated by the test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from chorus.tools.declarations import service_module
from chorus.tools.devstack import exit_code, free_port

ROOT = Path(__file__).resolve().parents[2]


class ServiceProcess:
    def __init__(self, module: str, env: dict[str, str], log_dir: Path, name: str | None = None) -> None:
        self.module = module
        self.name = name or module
        self.port = free_port()
        self.env = {
            **os.environ,
            "CHORUS_HTTP_PORT": str(self.port),
            "CHORUS_LOG_JSON": "true",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.log_path = log_dir / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, **extra_env: str) -> ServiceProcess:
        self.starts += 1
        log = self.log_path.open("ab")
        log.write(f"--- start #{self.starts} ---\n".encode())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", service_module(self.module)],
            env={**self.env, **extra_env},
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def wait_healthy(self, timeout_s: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while loop.time() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
                try:
                    response = await client.get(f"{self.url}/health")
                    if response.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"{self.name} not healthy after {timeout_s}s:\n{self.tail()}")

    async def wait_exit(self, timeout_s: float = 60.0) -> int:
        assert self.proc is not None
        code = await exit_code(self.proc, timeout_s)
        if code is None:
            raise AssertionError(f"{self.name} still running after {timeout_s}s:\n{self.tail()}")
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait for the graceful exit."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return await self.wait_exit(timeout_s)
        finally:
            self.kill()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *_: object) -> None:
        self.kill()


def infra_env(registry_root: Path, kafka: str, database_url: str) -> dict[str, str]:
    """The environment that points a service process at a test's registry, Kafka and
    PostgreSQL."""
    return {
        "CHORUS_SCHEMAS_DIR": str(registry_root),
        "CHORUS_KAFKA_BOOTSTRAP": kafka,
        "CHORUS_DATABASE_URL": database_url,
    }


CHORUS = str(Path(sys.executable).parent / "chorus")
"""The ``chorus`` console script of this virtualenv."""


async def chorus(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run the ``chorus`` console script (as the demo operator unless ``env`` says
    otherwise); returns (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        CHORUS,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "COLUMNS": "240", "CHORUS_API_KEY": "demo-operator-key", **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=300)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def run_captured(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout_s: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``args`` run to the end, its output captured as text; its exit code is the test's
    to judge (never raised)."""
    return subprocess.run(
        args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def user_env() -> dict[str, str]:
    """This environment as a user in a project of their own has it: nothing of this
    checkout's registry or path."""
    return {k: v for k, v in os.environ.items() if k not in {"CHORUS_SCHEMAS_DIR", "PYTHONPATH"}}


def run_chorus(cwd: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """The ``chorus`` command of this venv in ``cwd``, as a user in a project of their own
    runs it (user_env)."""
    return run_captured([CHORUS, *args], cwd=cwd, env=user_env(), timeout_s=timeout_s)
