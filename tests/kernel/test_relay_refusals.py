"""What the outbox relay takes for the broker's refusal of a row (set aside, dead-lettered)
and what for the broker being out of reach (the row stays, the round is tried again).

aiokafka says "unknown topic" both when the broker answers that the topic does not exist and
when no broker answered its metadata requests for a request timeout. A network partition
between a service and its broker used to make the relay dead-letter committed rows (the
reliability suite's partition-kafka-after-commit found it); only a metadata answer that
lacks the topic is a refusal now. The topic that really does not exist is set aside as
before (test_relay_isolation.py, on a real broker).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, UnknownTopicOrPartitionError

from chorus.kernel.relay import OutboxRelay
from chorus.kernel.store import OutboxRow

ROW = OutboxRow(1, "procurement.events", b"wf-1", b"{}", [])


class Cluster:
    def __init__(self, topics: set[str]) -> None:
        self._topics = topics

    def topics(self) -> set[str]:
        return self._topics


class Producer:
    """Sends fail as aiokafka's do when the topic's metadata never came."""

    def __init__(self, metadata: Any) -> None:
        self.client = SimpleNamespace(fetch_all_metadata=metadata)
        self.sent = 0

    async def send(self, *args: Any, **kwargs: Any) -> Any:
        self.sent += 1
        raise UnknownTopicOrPartitionError()


def relay(producer: Producer) -> OutboxRelay:
    out = OutboxRelay.__new__(OutboxRelay)  # only what _isolate and _refused read
    out.producer = producer  # a stand-in: no broker here
    out.new_producer = None
    set_aside: list[OutboxRow] = []

    async def aside(row: OutboxRow, error: BaseException) -> None:
        set_aside.append(row)

    out._set_aside = aside  # type: ignore[method-assign]
    out.set_aside_rows = set_aside  # type: ignore[attr-defined]
    return out


async def test_a_broker_out_of_reach_is_not_a_refusal_and_the_row_stays() -> None:
    async def unreachable() -> Cluster:
        raise KafkaConnectionError("no broker answered")

    r = relay(Producer(unreachable))
    with pytest.raises(UnknownTopicOrPartitionError):
        await r._isolate([ROW], {})
    assert r.set_aside_rows == []  # type: ignore[attr-defined]


async def test_a_topic_the_answering_broker_has_is_not_a_refusal_either() -> None:
    async def has_it() -> Cluster:
        return Cluster({ROW.topic})

    assert not await relay(Producer(has_it))._refused(ROW, UnknownTopicOrPartitionError())


async def test_a_topic_the_answering_broker_lacks_is_a_refusal() -> None:
    async def lacks_it() -> Cluster:
        return Cluster({"other.topic"})

    r = relay(Producer(lacks_it))
    await r._isolate([ROW], {})
    assert r.set_aside_rows == [ROW]  # type: ignore[attr-defined]
