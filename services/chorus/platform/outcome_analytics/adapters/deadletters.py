"""Dead letters of the analytics app, published straight to the dead-letter topic.

The envelope comes from :func:`chorus.deadletters.dead_letter_envelope`, the same
builder the runtime uses, so a record dead-lettered twice (once per rebuild of the
view) carries one event id both times.
"""

from __future__ import annotations

from typing import Protocol

from chorus.contracts.envelope import Envelope
from chorus.kernel.codec import encode
from chorus.kernel.outbox import envelope_headers
from chorus.platform.outcome_analytics.adapters.producer import DurableProducer
from chorus.privacy.signing import Signer


class DeadLetterSink(Protocol):
    async def publish(self, envelope: Envelope) -> None:
        """Return once the dead letter is durable; block (retrying) until it is."""
        ...


class KafkaDeadLetters:
    """Publishes dead letters, signed, to the registry's dead-letter topic."""

    def __init__(self, producer: DurableProducer, topic: str, signer: Signer) -> None:
        self.producer = producer
        self.topic = topic
        self.signer = signer
        self.published = 0

    async def publish(self, envelope: Envelope) -> None:
        value = encode(envelope)
        headers = [*envelope_headers(envelope), self.signer.header(value)]
        await self.producer.send(
            self.topic, value, key=envelope.workflow_id.encode(), headers=headers, what="dead letter"
        )
        self.published += 1
