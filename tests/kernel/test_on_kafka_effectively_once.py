"""The runtime turns at-least-once delivery into one state change and one set of outputs."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from chorus.contracts.registry import Registry
from chorus.platform.audit_projector.service import make_spec as audit_spec
from chorus.runtime.runner import ServiceSettings, running
from tests.support.events import TaskSubmitted
from tests.support.kafka import envelope, events_of, publish, read_topic
from tests.support.registry import as_the_projector, isolated_registry
from tests.support.sealed import opened
from tests.support.testservice import make_spec
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


def settings(kafka_bootstrap: str, database_url: str, **extra: Any) -> ServiceSettings:
    return ServiceSettings(
        kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False, **extra
    )


async def test_same_event_five_times_changes_state_once(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    spec = make_spec(f"svc_{unique}")
    env = envelope(TaskSubmitted(task="t1"))
    await publish(kafka_bootstrap, topic, [env] * 5)

    async with running(spec, settings(kafka_bootstrap, database_url), registry=registry) as runner:
        await wait_until(
            lambda: runner.metrics.duplicates._value.get() >= 4,
            what="four duplicates skipped",
        )
        records = await read_topic(
            kafka_bootstrap, [topic], until=lambda rs: len(events_of(rs, "test.task_done")) >= 1
        )
    done = events_of(records, "test.task_done")
    assert len(done) == 1
    assert done[0]["payload"] == {"task": "t1", "attempt": 1, "handled_count": 1}
    assert done[0]["causation_id"] == str(env.event_id)
    state = await pg.fetchval(
        f"SELECT state->>'handled' FROM svc_{unique}.state WHERE workflow_id = $1", env.workflow_id
    )
    assert state == "1"


async def test_poison_records_are_dead_lettered_with_their_bytes_and_consumer_goes_on(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    dlq = registry.physical_topic("event.dead_lettered")
    not_json = b"\x00\xffnot json at all"
    good = envelope(TaskSubmitted(task="fine"))
    bad = json.loads(envelope(TaskSubmitted(task="typed")).model_dump_json())
    bad["payload"]["transient_failures"] = "three"  # a string where an integer belongs
    invalid = json.dumps(bad).encode()
    await publish(kafka_bootstrap, topic, [not_json], key=b"k1")
    await publish(kafka_bootstrap, topic, [invalid], key=bad["workflow_id"].encode())
    await publish(kafka_bootstrap, topic, [good])

    async with running(
        spec := make_spec(f"svc_{unique}"),
        settings(kafka_bootstrap, database_url),
        registry=registry,
    ):
        records = await read_topic(
            kafka_bootstrap,
            [topic, dlq],
            until=lambda rs: (
                len(events_of(rs, "event.dead_lettered")) >= 2 and len(events_of(rs, "test.task_done")) >= 1
            ),
        )
    letters = {
        base64.b64decode(opened(d["payload"]["original"])["value_b64"]): d["payload"]
        for d in events_of(records, "event.dead_lettered")
    }
    assert set(letters) == {not_json, invalid}
    assert letters[not_json]["error"]["error_class"] == "NotJSONError"
    assert letters[invalid]["error"]["error_class"] == "SchemaValidationError"
    assert letters[invalid]["error"]["pointer"] == "/payload/transient_failures"
    assert opened(letters[invalid]["original"])["topic"] == topic
    assert letters[invalid]["service"] == spec.name
    assert [d["payload"]["task"] for d in events_of(records, "test.task_done")] == ["fine"]


async def test_a_poison_record_near_the_broker_limit_still_reaches_the_dead_letter_topic(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    # Its dead letter is a third larger (base64) than the broker's default 1 MB limit;
    # the dead-letter topic allows more, so the outbox relay does not get stuck on it.
    async with as_the_projector(tmp_path, unique, kafka_bootstrap) as (registry, projector_name):
        await _poison_near_the_limit(registry, projector_name, kafka_bootstrap, database_url, unique)


async def _poison_near_the_limit(
    registry: Registry, projector_name: str, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    topic = registry.physical_topic("test.task_submitted")
    dlq = registry.physical_topic("event.dead_lettered")
    big = b"\xff" + bytes(range(256)) * 3500  # ~900 KB, not JSON
    good = envelope(TaskSubmitted(task="after-the-big-one"))
    await publish(kafka_bootstrap, topic, [big], key=b"big")
    await publish(kafka_bootstrap, topic, [good])
    # The audit projector reads the dead-letter topic: a 1.2 MB dead letter is within that
    # topic's limit, so it is recorded, not dead-lettered again (a growing loop before).
    common = settings(kafka_bootstrap, database_url)
    async with (
        running(make_spec(f"svc_{unique}"), common, registry=registry),
        running(audit_spec(projector_name), common, registry=registry) as projector,
    ):
        records = await read_topic(
            kafka_bootstrap,
            [topic, dlq],
            until=lambda rs: (
                bool(events_of(rs, "event.dead_lettered")) and bool(events_of(rs, "test.task_done"))
            ),
        )
        await wait_until(
            lambda: projector.metrics.events_in.labels(dlq, "event.dead_lettered")._value.get() >= 1,
            what="the projector to read the dead letter",
        )
        await asyncio.sleep(1.0)
        assert projector.metrics.dead_letters.labels("decode")._value.get() == 0
    letters = events_of(records, "event.dead_lettered")
    assert len(letters) == 1
    letter = letters[0]["payload"]
    assert base64.b64decode(opened(letter["original"])["value_b64"]) == big
    assert [d["payload"]["task"] for d in events_of(records, "test.task_done")] == ["after-the-big-one"]
