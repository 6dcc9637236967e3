"""Polling for an eventually-true condition, with a failure that says what was awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_until(
    probe: Callable[[], Awaitable[T]] | Callable[[], T],
    *,
    timeout_s: float = 60.0,
    interval_s: float = 0.1,
    what: str = "condition",
) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last: T | None = None
    while True:
        result = probe()
        if asyncio.iscoroutine(result):
            result = await result
        last = result  # type: ignore[assignment]
        if result:
            return result  # type: ignore[return-value]
        if loop.time() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s}s waiting for {what} (last: {last!r})"
            )
        await asyncio.sleep(interval_s)
