"""OpenTelemetry's messaging conventions for the kernel's spans: what a trace backend reads of
consuming (``process <topic>``) and publishing (``send <topic>``) a record on Kafka."""

from __future__ import annotations

from dataclasses import dataclass

from chorus.base.tracing import Attributes


def _messaging(
    operation: str, topic: str, event_id: str, partition: int, offset: int
) -> dict[str, str | int]:
    return {
        "messaging.system": "kafka",
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": topic,
        "messaging.destination.partition.id": str(partition),
        "messaging.kafka.offset": offset,
        "messaging.message.id": event_id,
    }


@dataclass(frozen=True)
class Delivery:
    """Where a handled event came from: a record of a topic, read by a consumer group."""

    topic: str
    partition: int
    offset: int
    group: str
    event_id: str
    key: str | None = None

    @property
    def span_name(self) -> str:
        return f"process {self.topic}"

    def attributes(self) -> Attributes:
        found = {
            **_messaging("process", self.topic, self.event_id, self.partition, self.offset),
            "messaging.consumer.group.name": self.group,
        }
        if self.key is not None:
            found["messaging.kafka.message.key"] = self.key
        return found


def published(topic: str, event_id: str, partition: int, offset: int) -> tuple[str, Attributes]:
    """The name and attributes of the PRODUCER span of a published event."""
    return f"send {topic}", _messaging("send", topic, event_id, partition, offset)
