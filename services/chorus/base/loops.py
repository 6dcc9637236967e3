"""Background loops that must outlive a database or broker restart.

A worker (timer firing, gauges, the janitor, housekeeping) runs one round after another
for the life of the process. A round that fails because PostgreSQL restarts or the pool
refills is logged and the next round runs after a pause: nothing was half done, because
each round is its own transaction. Cancellation (shutdown) ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn, TypeVar

import uvloop

log = logging.getLogger("chorus.loops")

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")


def run_main(main: Coroutine[Any, Any, T]) -> T:
    """Run a process's main coroutine on uvloop, as every service does.

    libuv's loop and its C TLS transport (Kafka is spoken over TLS) spend fewer
    microseconds per wake-up and per record than asyncio's pure-Python ones; a hop
    is a chain of such wake-ups (fetch, pool, commit, relay, produce, ack).

    uvloop.run is asyncio.run on a new uvloop loop on every Python version (3.10 has no
    asyncio.Runner and no loop_factory): the remaining tasks are cancelled, async
    generators and the default executor shut down, and the loop closed at the end.
    """
    return uvloop.run(main)


async def forever(
    name: str,
    round_: Callable[[], Awaitable[float | None]],
    *,
    every_s: float,
    sleep: Sleep = asyncio.sleep,
    retry_s: float | None = None,
) -> NoReturn:
    """Run ``round_`` for ever. It returns how long to wait before the next round (None:
    ``every_s``; 0: at once), waited with ``sleep`` (the service's clock, which tests move).
    After a failed round, wait ``retry_s`` (default ``every_s``) of real time: an outage
    passes in real time whatever a test's clock says."""
    while True:
        try:
            wait_s = await round_()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            pause_s = retry_s if retry_s is not None else every_s
            log.warning("%s: round failed (%r); next round in %.1fs", name, exc, pause_s)
            await asyncio.sleep(pause_s)
            continue
        wait_s = every_s if wait_s is None else wait_s
        if wait_s > 0:
            await sleep(wait_s)
