"""Network namespaces of a test's own (``ip netns``, as root): a loopback nothing else on
this machine listens on, and no route anywhere else. Processes run there with
``[*exec_in(name), program, ...]``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator


def exec_in(name: str) -> list[str]:
    """The argv prefix that runs a program in namespace ``name`` (``ip`` execs it: its pid,
    and so its process group, are the program's own)."""
    return ["ip", "netns", "exec", name]


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=30)
    if done.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)} (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


@contextlib.contextmanager
def network_namespace(prefix: str = "chorus-test") -> Iterator[str]:
    """A new namespace with its loopback up; on exit every process still in it is killed
    and it is deleted. Failing to make one fails the test (root and iproute2 are needed)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        for pid in _ip("netns", "pids", name).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", name)
