"""Group commit: many concurrent callers, one database round trip.

Lanes of different workflows finish their handlers at about the same time; each
would otherwise pay its own round trip (and its own fsync) to load or commit.
Callers submit and await; a worker takes everything waiting (up to
``max_batch``) and runs it as one batch. A lone caller is never delayed: with
nothing else waiting, its batch has one item and goes at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

BatchFn = Callable[[list[T]], Awaitable[list[R | BaseException]]]


class Coalescer(Generic[T, R]):
    def __init__(self, run_batch: BatchFn[T, R], *, max_batch: int = 256, workers: int = 2) -> None:
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._workers = workers
        self._queue: asyncio.Queue[tuple[T, asyncio.Future[R]]] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def submit(self, item: T) -> R:
        """Run ``item`` in the next batch; its own result or exception comes back."""
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._tasks = [asyncio.create_task(self._work(), name="coalescer") for _ in range(self._workers)]
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        await self._queue.put((item, future))
        return await future

    async def _work(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            batch = [await queue.get()]
            while len(batch) < self._max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            items = [item for item, _ in batch]
            try:
                results = await self._run_batch(items)
            except Exception as exc:  # the whole batch failed (database down): each caller sees it
                results = [exc] * len(batch)
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue  # the caller was cancelled (shutdown)
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._queue = None
