"""The app's own producer: every send retried until the broker acknowledges it.

Facts and dead letters both stand for a record whose offset faust commits once the
send returns, so a send is never given up on: a broker that cannot take it cannot
serve the input topics either.
"""

from __future__ import annotations

import asyncio
import logging
import random

from aiokafka import AIOKafkaProducer

from chorus.base.logs import fields
from chorus.kernel.kafka import make_producer, stop_client

log = logging.getLogger(__name__)


class DurableProducer:
    """An idempotent, acks=all producer (:func:`chorus.kernel.kafka.make_producer`) whose
    :meth:`send` returns only once the record is durable, retrying with capped, jittered
    backoff for as long as it takes."""

    def __init__(self, bootstrap: str, *, client_id: str, retry_max_s: float = 30.0) -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.retry_max_s = retry_max_s
        self._producer: AIOKafkaProducer | None = None
        self._started = asyncio.Event()

    async def start(self) -> None:
        self._producer = make_producer(self.bootstrap, client_id=self.client_id)
        await self._producer.start()
        self._started.set()

    async def stop(self) -> None:
        if self._producer is not None:
            self._started.clear()
            await stop_client(self._producer)
            self._producer = None

    async def send(
        self, topic: str, value: bytes, *, key: bytes, headers: list[tuple[str, bytes]], what: str
    ) -> None:
        attempt = 0
        while True:
            attempt += 1
            producer = await self._running()
            try:
                await producer.send_and_wait(topic, value, key=key, headers=headers)
                return
            except Exception as exc:  # anything but cancellation: retried, never dropped
                wait_s = random.uniform(0, min(self.retry_max_s, 0.2 * 2**attempt))
                log.error(
                    f"{what} not published; retrying",
                    extra=fields(topic=topic, attempt=attempt, retry_in_s=round(wait_s, 3), error=repr(exc)),
                )
                await asyncio.sleep(wait_s)

    async def _running(self) -> AIOKafkaProducer:
        # The worker starts faust's agents and this producer side by side, and stops them
        # so too: a send waits for a running producer (failing would skip its record; one
        # still waiting at the stop is cancelled, its record read again on the next start).
        while True:
            await self._started.wait()
            if self._producer is not None:
                return self._producer
