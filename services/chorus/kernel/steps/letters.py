"""Dead letters of records by their position: input that is not a valid event, is not
proven to come from who it names, or whose outcome cannot be stored under its event's id."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from chorus.base.clock import Clock
from chorus.base.errors import PersistentError
from chorus.base.logs import fields
from chorus.base.metrics import Metrics
from chorus.kernel.chain import poison_id
from chorus.kernel.deadletters import failure
from chorus.kernel.messages import Messages
from chorus.kernel.records import Record
from chorus.kernel.store import Claim, InboxOutcome, Store

log = logging.getLogger("chorus.pipeline")


@dataclass
class Letters:
    store: Store
    messages: Messages
    group: str
    clock: Clock
    metrics: Metrics
    on_outbox: Callable[[], None]
    """A letter was committed (the relay reads it)."""

    async def record(self, rec: Record, exc: PersistentError, parked_id: int | None = None) -> None:
        """Dead-letter ``rec``, once, with its bytes, keyed by its position (and let go of it
        if it was parked).

        Poison input does not count towards the dead-letter guard: it says nothing about
        this deploy, and a flood of it from outside (or a replay over records dead-lettered
        before) must not stop the consumer. The guard watches handlers.
        """
        now = self.clock.now()
        self.metrics.failures.labels(exc.category, "undecodable").inc()
        message = await self.messages.dead_letter(rec, exc, exc.category, 1, [failure(exc, 1, now)], now)
        claim = Claim(self.group, poison_id(self.group, rec), 1, InboxOutcome.DEAD_LETTERED, None, None, now)
        if not await self.store.dead_letter(claim, message, parked_id):
            self.metrics.duplicates.inc()  # dead-lettered before (offsets rewound)
            return
        self.on_outbox()
        self.metrics.dead_letters.labels(exc.category).inc()
        log.error(
            "dead-lettered a record by its position",
            extra=fields(topic=rec.topic, partition=rec.partition, offset=rec.offset, error=str(exc)),
        )
