"""The reliability suite's fault points (chorus.base.faults): a process kills itself, or
stops itself, the n-th time it passes the point it is armed with, and nowhere else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

PASSES = """
from chorus.base.faults import fault_point
for _ in range(3):
    fault_point("p")
    print("passed", flush=True)
"""


def run(faults: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PASSES],
        env={**os.environ, "CHORUS_FAULTS": faults},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_armed_with_a_count_it_is_killed_at_that_pass() -> None:
    proc = run("p:2")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert out.split("\n").count("passed") == 1
    assert "chorus fault injection: SIGKILL at p" in err


def test_armed_to_stop_it_freezes_there_and_goes_on_when_continued() -> None:
    proc = run("p:2:stop")
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out.split("\n").count("passed") == 3  # stopped once, then every pass went on
    assert "chorus fault injection: SIGSTOP at p" in err


def test_an_unarmed_point_costs_nothing_and_never_fires() -> None:
    proc = run("other:1")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.split("\n").count("passed") == 3
