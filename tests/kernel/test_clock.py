"""Clocks: simulated time that several processes share through a file."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from chorus.base.clock import ManualClock, OffsetFileClock, clock_from_setting


def test_offset_file_moves_every_reader(tmp_path: Path) -> None:
    path = tmp_path / "clock"
    a, b = OffsetFileClock(path, refresh_s=0), OffsetFileClock(path, refresh_s=0)
    before = a.now()
    OffsetFileClock.advance(path, 18 * 3600)
    assert (a.now() - before).total_seconds() >= 18 * 3600
    assert abs((a.now() - b.now()).total_seconds()) < 1


async def test_sleep_ends_early_when_time_is_advanced(tmp_path: Path) -> None:
    path = tmp_path / "clock"
    clock = OffsetFileClock(path, refresh_s=0)
    started = time.monotonic()
    sleeper = asyncio.create_task(clock.sleep(3600))
    await asyncio.sleep(0.1)
    OffsetFileClock.advance(path, 3600)
    await asyncio.wait_for(sleeper, timeout=5)
    assert time.monotonic() - started < 5


async def test_manual_clock_wakes_sleepers_on_advance() -> None:
    clock = ManualClock()
    sleeper = asyncio.create_task(clock.sleep(60))
    await asyncio.sleep(0.1)
    assert not sleeper.done()
    clock.advance(61)
    await asyncio.wait_for(sleeper, timeout=2)


def test_clock_setting_names() -> None:
    assert type(clock_from_setting("system")).__name__ == "SystemClock"
    assert type(clock_from_setting("offset-file:/tmp/x")).__name__ == "OffsetFileClock"
