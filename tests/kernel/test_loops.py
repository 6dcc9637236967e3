"""Background loops outlive failing rounds, wait what each round asks, and stop on cancel."""

from __future__ import annotations

import asyncio

import pytest

from chorus.base.loops import forever


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
