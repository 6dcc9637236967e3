"""CPU time and memory of processes, read from /proc (Linux only, no dependencies)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0.0 when it has exited)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    # The command name (field 2) may contain spaces; fields after it are fixed.
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in first[:8]]
    idle = values[3] + values[4]
    total = sum(values)
    return (total - idle) / CLK_TCK, total / CLK_TCK


def find_pids(needle: str) -> list[int]:
    """Processes whose command line contains ``needle``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


@dataclass
class CpuWindow:
    """CPU seconds used by a changing set of processes between two points in time."""

    start: dict[int, float]

    @classmethod
    def open(cls, pids: list[int]) -> CpuWindow:
        return cls({pid: cpu_seconds(pid) for pid in pids})

    def close(self, pids: list[int]) -> float:
        # A process that appeared during the window (a new PostgreSQL backend) counts from 0.
        return sum(cpu_seconds(pid) - self.start.get(pid, 0.0) for pid in set(pids) | set(self.start))
