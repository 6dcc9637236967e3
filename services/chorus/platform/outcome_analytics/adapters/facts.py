"""Facts from the intake to the view's own topic, keyed by the workflow they change."""

from __future__ import annotations

from chorus.platform.outcome_analytics.adapters.producer import DurableProducer
from chorus.platform.outcome_analytics.domain import Fact


class KafkaFacts:
    """Sends each fact to ``topic`` and returns once it is durable.

    One at a time, in the order the intake reads its records: the facts of a workflow
    reach its partition in that order (the view converges whatever the order; this keeps
    a record's offset from being committed before its fact is on the topic).
    """

    def __init__(self, producer: DurableProducer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.sent = 0

    async def send(self, fact: Fact) -> None:
        await self.producer.send(
            self.topic, fact.model_dump_json().encode(), key=fact.key.encode(), headers=[], what="fact"
        )
        self.sent += 1
