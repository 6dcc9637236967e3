"""Kafka clients with the settings that do not lose data.

aiokafka's defaults (``acks=1``, no idempotence, auto-commit) can lose or
duplicate events on a broker failover or a crash; every Chorus client is built
here so that no service can forget to override them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

MAX_REQUEST_BYTES = 8 * 1024 * 1024


def make_producer(
    bootstrap: str,
    *,
    client_id: str = "chorus",
    transactional_id: str | None = None,
    linger_ms: int = 2,
    **overrides: Any,
) -> AIOKafkaProducer:
    """An idempotent producer that waits for every in-sync replica (acks=all)."""
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": client_id,
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": linger_ms,
        "request_timeout_ms": 30000,
        # The broker enforces each topic's max.message.bytes; the client must not refuse
        # first: a dead letter wraps a record of up to ~1 MB in base64 plus its context.
        "max_request_size": MAX_REQUEST_BYTES,
    }
    if transactional_id is not None:
        options["transactional_id"] = transactional_id
    options.update(overrides)
    return AIOKafkaProducer(**options)


def make_consumer(
    bootstrap: str,
    *topics: str,
    group_id: str | None,
    client_id: str = "chorus",
    **overrides: Any,
) -> AIOKafkaConsumer:
    """A consumer that commits only when told to and never reads aborted transactions."""
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": group_id,
        "client_id": client_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
    }
    options.update(overrides)
    return AIOKafkaConsumer(*topics, **options)


async def ensure_topics(
    bootstrap: str,
    topics: Iterable[tuple[str, int]],
    *,
    replication_factor: int = 1,
    configs: dict[str, str] | None = None,
) -> list[str]:
    """Create the (name, partitions) topics that do not exist yet; returns the created names."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="chorus-admin")
    await admin.start()
    created: list[str] = []
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                topic_configs=dict(configs or {}),
            )
            for name, partitions in topics
            if name not in existing
        ]
        if wanted:
            response = await admin.create_topics(wanted)
            for topic_error in response.topic_errors:
                name, code = topic_error[0], topic_error[1]
                message = topic_error[2] if len(topic_error) > 2 else ""
                if code == TopicAlreadyExistsError.errno:
                    continue  # a concurrent creator won the race; the topic exists
                if code != 0:
                    raise RuntimeError(f"could not create topic {name!r}: error {code} {message}")
                created.append(name)
    finally:
        await admin.close()
    return created


def make_admin(
    bootstrap: str, *, client_id: str = "chorus-admin", request_timeout_ms: int = 15000
) -> AIOKafkaAdminClient:
    """An admin client; the caller starts and closes it.

    A request timeout shorter than aiokafka's 40 s, so that an operator's command
    against a sick cluster answers within seconds rather than hanging.
    """
    return AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
    )
