"""Answering a request addressed to the service, once: claimed in its inbox and answered
through its outbox, in the transaction that does what was asked.

Features that act on such requests outside the handlers (a subject's erasure, a retention
run, an operator's re-pin) record the request in the inbox, so that a redelivery changes
nothing, and publish their answer as a child of the request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from chorus.base.clock import Clock
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.kernel.envelopes import child_envelope
from chorus.kernel.outbox import OutboxTransaction, OutboxWriter
from chorus.kernel.store import Claim, InboxOutcome
from chorus.kernel.store.postgres import ServiceStore


@dataclass(frozen=True)
class Answering:
    sql: ServiceStore
    pool: asyncpg.Pool
    outbox: OutboxWriter
    clock: Clock
    producer: ProducerRef
    group: str
    """The consumer group whose inbox records the request."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[tuple[asyncpg.Connection, OutboxTransaction]]:
        async with self.pool.acquire() as conn, self.outbox.transaction(conn) as tx:
            yield conn, tx

    async def claim(
        self, conn: asyncpg.Connection, request: Envelope, recorded: InboxOutcome = InboxOutcome.DONE
    ) -> bool:
        """Record ``request`` in the inbox as ``recorded``; False when it was recorded already."""
        claim = Claim(
            self.group,
            request.event_id,
            request.attempt,
            recorded,
            request.event_type,
            request.workflow_id,
            self.clock.now(),
        )
        return await self.sql.claim_inbox(conn, claim)

    def answer(self, request: Envelope, payload: EventModel, *, position: str) -> Envelope:
        """``payload`` as this service's answer to ``request`` (its child, in its workflow)."""
        return child_envelope(
            request, payload, producer=self.producer, now=self.clock.now(), position=position
        )
