"""Dead letters of the analytics app, published straight to the dead-letter topic.

The envelope comes from :func:`chorus.deadletters.dead_letter_envelope`, the same
builder the runtime uses, so a record dead-lettered twice (once per rebuild of the
view) carries one event id both times.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Protocol

from aiokafka import AIOKafkaProducer

from chorus.base.logs import fields
from chorus.contracts.envelope import Envelope
from chorus.kernel.codec import encode
from chorus.kernel.kafka import make_producer, stop_client
from chorus.kernel.outbox import envelope_headers
from chorus.privacy.signing import Signer

log = logging.getLogger(__name__)


class DeadLetterSink(Protocol):
    async def publish(self, envelope: Envelope) -> None:
        """Return once the dead letter is durable; block (retrying) until it is."""
        ...


class KafkaDeadLetters:
    """Publishes dead letters to the registry's dead-letter topic.

    Idempotent, acks=all producer (:func:`chorus.kernel.kafka.make_producer`); ``publish``
    returns only after the broker acknowledged, and retries with capped, jittered
    backoff for as long as it takes: the record's offset must not move past it
    while its dead letter is not durable, and a broker that cannot take the dead
    letter cannot serve the input topics either.
    """

    def __init__(self, bootstrap: str, topic: str, signer: Signer, *, retry_max_s: float = 30.0) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.signer = signer
        self.retry_max_s = retry_max_s
        self.published = 0
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        self._producer = make_producer(self.bootstrap, client_id="outcome_analytics-dlq")
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            await stop_client(self._producer)
            self._producer = None

    async def publish(self, envelope: Envelope) -> None:
        if self._producer is None:
            raise RuntimeError("KafkaDeadLetters.publish before start")
        value = encode(envelope)
        headers = [*envelope_headers(envelope), self.signer.header(value)]
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._producer.send_and_wait(
                    self.topic,
                    value,
                    key=envelope.workflow_id.encode(),
                    headers=headers,
                )
            except Exception as exc:  # anything but cancellation: retried, never dropped
                wait_s = random.uniform(0, min(self.retry_max_s, 0.2 * 2**attempt))
                log.error(
                    "dead letter not published; retrying",
                    extra=fields(
                        topic=self.topic,
                        event_id=str(envelope.event_id),
                        attempt=attempt,
                        retry_in_s=round(wait_s, 3),
                        error=repr(exc),
                    ),
                )
                await asyncio.sleep(wait_s)
                continue
            self.published += 1
            return
