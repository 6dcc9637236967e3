"""Time, injected. No handler, retry or timer logic reads the wall clock directly.

- :class:`SystemClock`: real time.
- :class:`ManualClock`: in-process tests move time by hand.
- :class:`OffsetFileClock`: real time plus an offset read from a file, so that a
  test can move time forward for *several processes at once* (the timer service
  and the agents agree on "now" while an 18-hour wait passes in seconds), like
  Temporal's time-skipping test server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time (may return early when time jumps)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """Time stands still until :meth:`advance`; sleepers wake when their time comes."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=timezone.utc)
        self._changed = asyncio.Event()

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._changed.set()
        self._changed = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        until = self._now + timedelta(seconds=seconds)
        while self._now < until:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=0.05)


class OffsetFileClock:
    """System time plus the number of seconds written in ``path`` (0 when missing).

    The file is re-read at most every ``refresh_s`` so ``now()`` stays cheap.
    ``sleep`` returns early when the offset moves, so waits end promptly after a
    test advances time.
    """

    def __init__(self, path: Path, refresh_s: float = 0.05) -> None:
        self._path = path
        self._refresh_s = refresh_s
        self._offset = 0.0
        self._read_at = -1.0
        self._mtime: int | None = None

    def _current_offset(self) -> float:
        mono = time.monotonic()
        if mono - self._read_at >= self._refresh_s:
            self._read_at = mono
            try:
                stat = os.stat(self._path)
                if stat.st_mtime_ns != self._mtime:
                    self._mtime = stat.st_mtime_ns
                    self._offset = float(self._path.read_text().strip() or 0)
            except (FileNotFoundError, ValueError):
                self._offset = 0.0
        return self._offset

    def now(self) -> datetime:
        return datetime.now(timezone.utc) + timedelta(seconds=self._current_offset())

    async def sleep(self, seconds: float) -> None:
        start_offset = self._current_offset()
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            remaining = deadline - time.monotonic() - (self._current_offset() - start_offset)
            if remaining <= 0:
                return
            await asyncio.sleep(min(remaining, 0.1))

    @staticmethod
    def advance(path: Path, seconds: float) -> float:
        """Move every process's clock forward; returns the new total offset."""
        try:
            current = float(path.read_text().strip() or 0)
        except FileNotFoundError:
            current = 0.0
        new = current + seconds
        tmp = path.with_suffix(".tmp")
        tmp.write_text(repr(new))
        os.replace(tmp, path)
        return new


def clock_from_setting(setting: str) -> Clock:
    """``system`` or ``offset-file:<path>`` (see :class:`OffsetFileClock`)."""
    if setting == "system":
        return SystemClock()
    if setting.startswith("offset-file:"):
        return OffsetFileClock(Path(setting.removeprefix("offset-file:")))
    raise ValueError(f"unknown clock {setting!r}: use 'system' or 'offset-file:<path>'")
