"""The local stack from any directory, and `make services` keeping every service up."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from chorus.tools.devstack import DevStack, Proc, free_port, supervise
from tests.support.processes import run_captured

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def postgres_sh(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    script = str(ROOT / "deploy" / "local" / "postgres.sh")
    return run_captured([script, command], env=env, cwd=cwd, timeout_s=600)


async def test_postgres_starts_from_a_checkout_the_postgres_user_cannot_enter(tmp_path: Path) -> None:
    # Like a clone under /root or in `mktemp -d`: mode 700, closed to every other user.
    checkout = tmp_path / "clone"
    checkout.mkdir(mode=0o700)
    port = free_port()
    url = f"postgresql://chorus:chorus@127.0.0.1:{port}/chorus"
    env = {
        **os.environ,
        "CHORUS_LOCAL": str(checkout / ".local"),
        "CHORUS_PG_PORT": str(port),
        "CHORUS_DATABASE_URL": url,
    }
    if os.geteuid() == 0:
        # Leftovers of an earlier attempt where 'postgres' cannot reach them: start says so,
        # and reset (what it advises) clears them.
        leftovers = checkout / ".local" / "postgres"
        leftovers.mkdir(parents=True)
        (leftovers / "initdb.log").write_text("could not change directory")
        refused = postgres_sh("start", env, checkout)
        assert refused.returncode != 0 and "reset" in refused.stderr, refused.stderr
        cleared = postgres_sh("reset", env, checkout)
        assert cleared.returncode == 0, cleared.stderr
    try:
        started = postgres_sh("start", env, checkout)
        assert started.returncode == 0, started.stdout + started.stderr
        conn = await asyncpg.connect(url)
        try:
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close()
        home = checkout / ".local" / "postgres"
        if os.geteuid() == 0:  # the cluster runs as 'postgres', so it lives where that user can go
            assert home.is_symlink(), started.stderr
            assert "cannot enter" in started.stderr
        assert (home / "postgres.log").exists()
        status = postgres_sh("status", env, checkout)
        assert "running (private cluster" in status.stdout, status.stdout + status.stderr
    finally:
        reset = postgres_sh("reset", env, checkout)
        assert reset.returncode == 0, reset.stdout + reset.stderr
    assert not (checkout / ".local" / "postgres").exists()


async def test_a_service_that_exits_is_restarted_with_backoff_and_the_operator_is_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = DevStack(tmp_path, services=())
    crashing = Proc(
        "crashing_service",
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        dict(os.environ),
        tmp_path / "crashing_service.log",
        None,
    )
    stack.procs = {"crashing_service": crashing}
    crashing.start()
    stop = asyncio.Event()
    supervisor = asyncio.create_task(supervise(stack, stop, max_backoff_s=2.0))
    try:
        for _ in range(300):
            if crashing.starts >= 4:
                break
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await supervisor
    out = capsys.readouterr().out
    assert crashing.starts >= 4, out
    assert "crashing_service exited (code 3); restarting in 1s" in out
    assert "restarting in 2s" in out  # doubled, then capped
    assert "crashing_service restarted (start #2)" in out
