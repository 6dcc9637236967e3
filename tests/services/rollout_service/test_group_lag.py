"""Lag of a consumer group with no members, read from Kafka with the ACLs the registry
grants: the rollout service reports every service's (chorus_consumer_group_lag), and a
service's own principal reads its own, as KEDA's scaler does when it decides to wake an
agent scaled to zero."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from aiokafka.errors import GroupAuthorizationFailedError
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from pydantic import SecretStr

from chorus.kernel.kafka import KafkaAuth, kafka_auth, make_consumer, stop_client
from chorus.platform.rollout_service.adapters.grouplag import group_lags
from chorus.platform.rollout_service.config import Settings
from chorus.platform.rollout_service.service import SPEC
from chorus.runtime.runner import group_topics, running
from chorus.tools.devstack import service_password
from tests.support.kafka import publish
from tests.support.onkafka import in_process
from tests.support.registry import grant_access, isolated_registry
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


def login(principal: str) -> KafkaAuth:
    """The broker's view of ``principal``: its own SCRAM user and the registry's ACLs."""
    password = service_password(Path(os.environ["CHORUS_KAFKA_USERS_DIR"]), principal)
    return kafka_auth().model_copy(update={"sasl_username": principal, "sasl_password": SecretStr(password)})


async def committed(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """``group`` has read ``topic`` up to ``offset`` and has no member left."""
    consumer = make_consumer(bootstrap, group_id=group)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "")})
    finally:
        await stop_client(consumer)


async def test_a_group_with_no_members_shows_its_lag_to_the_rollout_service_and_to_its_own_service(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    await grant_access(registry, kafka_bootstrap)
    topic = group_topics(registry, "invoice_agent")[0]
    await publish(kafka_bootstrap, topic, [f"r{i}".encode() for i in range(10)])
    group = f"invoice_agent.{unique}"  # a group named after the service, as its releases' are
    await committed(kafka_bootstrap, group, topic, 4)

    assert await group_lags(kafka_bootstrap, login("rollout_service"), {group: [topic]}) == {
        group: {topic: 6}
    }
    # KEDA logs in as the service itself (the chart's TriggerAuthentication): its ACLs suffice.
    assert await group_lags(kafka_bootstrap, login("invoice_agent"), {group: [topic]}) == {group: {topic: 6}}
    # Another service may not look: the rollout service's ACLs are its own.
    with pytest.raises(GroupAuthorizationFailedError):
        await group_lags(kafka_bootstrap, login("notifier"), {group: [topic]})

    # The rollout service exports every service's group lag, while none of them runs.
    settings = Settings(**in_process(kafka_bootstrap, database_url), group_lag_interval_s=0.5)
    async with running(SPEC, settings, registry=registry) as service, httpx.AsyncClient() as http:
        assert service.http is not None
        url = f"http://127.0.0.1:{service.http.port}/metrics"
        series = f'chorus_consumer_group_lag{{service_name="invoice_agent",topic="{topic}"}} 10.0'
        # Its group "invoice_agent" never committed on this test's topic: all 10 are behind.
        await wait_until(lambda: http.get(url), until=lambda r: series in r.text, what=series)
