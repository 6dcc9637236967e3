"""Background loops outlive failing rounds, wait what each round asks, and stop on cancel."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from chorus.base.loops import forever
from tests.support.processes import run_captured

ROOT = Path(__file__).resolve().parents[2]


async def test_a_failing_round_is_followed_by_the_next_and_waits_are_the_rounds_own() -> None:
    rounds: list[str] = []
    waits: list[float] = []

    async def record_sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(rounds) >= 4:
            raise asyncio.CancelledError

    async def round_() -> float | None:
        rounds.append("round")
        if len(rounds) == 2:
            raise ConnectionError("database restarting")
        return 0 if len(rounds) == 3 else None

    with pytest.raises(asyncio.CancelledError):
        await forever("test", round_, every_s=7.0, sleep=record_sleep, retry_s=0.01)
    # Round 1 waits every_s, round 2 fails (a real 0.01 s pause), round 3 asks for no
    # wait at all, round 4 waits every_s and the loop is cancelled there.
    assert rounds == ["round"] * 4
    assert waits == [7.0, 7.0]


# In a process of its own: run_main sets and then clears the thread's event loop.
RUN_MAIN = """
import asyncio
from chorus.base.loops import run_main

async def left_running():
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        print("cancelled")
        raise

async def main():
    asyncio.get_running_loop().create_task(left_running())
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__

print(run_main(main()))
"""


def test_run_main_runs_on_uvloop_and_cancels_what_is_left_at_the_end() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "services"), str(ROOT)])}
    done = run_captured([sys.executable, "-c", RUN_MAIN], cwd=ROOT, env=env, timeout_s=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cancelled", "uvloop"]
