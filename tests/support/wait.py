"""Polling for an eventually-true condition, with a failure that says what was awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


async def wait_until(
    probe: Callable[[], Any],
    *,
    until: Callable[[Any], bool] = bool,
    timeout_s: float = 60.0,
    interval_s: float = 0.1,
    what: str = "condition",
) -> Any:
    """Call ``probe`` (sync or async) until ``until`` accepts what it returns (by default,
    until that is truthy); return that."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last: Any = None
    while True:
        result = probe()
        if asyncio.iscoroutine(result):
            result = await result
        last = result
        if until(result):
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval_s)
