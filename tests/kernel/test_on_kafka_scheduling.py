"""Priority lanes, step checkpoints, state migrations and the metrics endpoint."""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from chorus.platform.timer_service.config import Settings as TimerSettings
from chorus.platform.timer_service.service import SPEC as TIMER_SPEC
from chorus.runtime.runner import ServiceSettings, running
from tests.support.events import TaskSubmitted
from tests.support.kafka import envelope, events_of, publish, read_topic
from tests.support.onkafka import in_process
from tests.support.registry import isolated_registry
from tests.support.testservice import make_spec
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


async def test_a_burst_of_low_priority_work_does_not_starve_high_priority(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    low_topic = registry.physical_topic("test.task_submitted", "low")
    high_topic = registry.physical_topic("test.task_submitted", "high")
    assert low_topic != high_topic
    lows = [
        envelope(TaskSubmitted(task=f"low-{i}", mode="slow", sleep_s=0.02), priority="low")
        for i in range(300)
    ]
    highs = [envelope(TaskSubmitted(task=f"high-{i}"), priority="high") for i in range(5)]
    await publish(kafka_bootstrap, low_topic, lows)
    name = f"svc_{unique}"
    settings = ServiceSettings(
        kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False, concurrency=1
    )

    async def done_count(prefix: str) -> int:
        return int(
            await pg.fetchval(
                f"SELECT count(*) FROM {name}.state WHERE state->'tasks'->>0 LIKE $1", prefix + "%"
            )
        )

    async with running(make_spec(name), settings, registry=registry):
        await wait_until(lambda: done_count("low-"), what="some low-priority work done")
        await publish(kafka_bootstrap, high_topic, highs)
        await wait_until(
            lambda: _at_least(done_count("high-"), 5), timeout_s=60, what="all high-priority work"
        )
        lows_done_when_highs_finished = await done_count("low-")
    assert lows_done_when_highs_finished < 200, (
        f"high-priority work waited for {lows_done_when_highs_finished} of 300 low-priority tasks"
    )


async def _at_least(value: Any, n: int) -> bool:
    return bool(await value >= n)


async def test_step_checkpoints_make_a_retry_resume_after_the_last_finished_step(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    env = envelope(TaskSubmitted(task="report", mode="steps"))
    await publish(kafka_bootstrap, topic, [env])
    common = in_process(kafka_bootstrap, database_url)
    name = f"svc_{unique}"
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(
            running(
                TIMER_SPEC,
                TimerSettings(**common, group_id=f"timers-{unique}", max_idle_s=0.1),
                registry=registry,
            )
        )
        await stack.enter_async_context(
            running(make_spec(name), ServiceSettings(**common), registry=registry)
        )
        records = await read_topic(
            kafka_bootstrap, [topic], until=lambda rs: bool(events_of(rs, "test.task_done"))
        )
    assert events_of(records, "test.task_done")[0]["payload"]["attempt"] == 2
    state = json.loads(
        await pg.fetchval(f"SELECT state FROM {name}.state WHERE workflow_id = $1", env.workflow_id)
    )
    assert state["steps_done"] == [1, 2, 3]
    assert state["step_calls"] == [1, 2, 3]  # steps 1 and 2 were not run again on attempt 2


async def test_old_checkpoints_are_migrated_on_load(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    from dataclasses import replace

    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    name = f"svc_{unique}"
    env = envelope(TaskSubmitted(task="after-upgrade"))
    # A checkpoint written by v1 of the service, whose state called the counter "count".
    spec_v2 = replace(
        make_spec(name),
        state_version=2,
        state_migrations={1: lambda old: {"handled": old["count"], "tasks": old["names"]}},
    )
    common = in_process(kafka_bootstrap, database_url)
    async with running(spec_v2, ServiceSettings(**common), registry=registry):
        await pg.execute(
            f"""INSERT INTO {name}.state (workflow_id, workflow_type, state, state_version, revision,
                created_at, updated_at) VALUES ($1, 'test', $2::jsonb, 1, 1, now(), now())""",
            env.workflow_id,
            json.dumps({"count": 41, "names": ["old"]}),
        )
        await publish(kafka_bootstrap, topic, [env])
        records = await read_topic(
            kafka_bootstrap, [topic], until=lambda rs: bool(events_of(rs, "test.task_done"))
        )
        row = await pg.fetchrow(
            f"SELECT state, state_version FROM {name}.state WHERE workflow_id = $1", env.workflow_id
        )
    assert events_of(records, "test.task_done")[0]["payload"]["handled_count"] == 42
    assert row["state_version"] == 2
    assert json.loads(row["state"])["tasks"] == ["old", "after-upgrade"]


async def test_a_checkpoint_from_a_newer_version_is_refused_and_nothing_is_written_back(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    """The downgrade: v1 of a service meets state v2 (a field v1 does not know). It must not
    drop the field and write the rest back: the event is dead-lettered saying why, the
    checkpoint stays as v2 wrote it, and the workflow's next event waits behind it."""
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    name = f"svc_{unique}"
    first = envelope(TaskSubmitted(task="on-v1"))
    later = envelope(TaskSubmitted(task="behind-it"), workflow_id=first.workflow_id)
    newer = {"handled": 7, "tasks": ["on-v2"], "priority_notes": ["only v2 knows this field"]}
    settings = ServiceSettings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False)
    async with running(make_spec(name), settings, registry=registry):  # state v1
        await pg.execute(
            f"""INSERT INTO {name}.state (workflow_id, workflow_type, state, state_version, revision,
                created_at, updated_at) VALUES ($1, 'test', $2::jsonb, 2, 1, now(), now())""",
            first.workflow_id,
            json.dumps(newer),
        )
        await publish(kafka_bootstrap, topic, [first, later])
        records = await read_topic(
            kafka_bootstrap,
            [topic, registry.physical_topic("event.dead_lettered")],
            until=lambda rs: bool(events_of(rs, "event.dead_lettered")),
        )
        await asyncio.sleep(2)  # time for the later event to be (not) handled
        row = await pg.fetchrow(
            f"SELECT state::text AS state, state_version, parked_on FROM {name}.state WHERE workflow_id = $1",
            first.workflow_id,
        )
        parked = await pg.fetchval(
            f"SELECT count(*) FROM {name}.parked WHERE workflow_id = $1", first.workflow_id
        )
        more = await read_topic(kafka_bootstrap, [topic], until=lambda rs: len(rs) >= 2)
    [letter] = [e["payload"] for e in events_of(records, "event.dead_lettered")]
    assert letter["error"]["error_class"] == "NewerStateError" and letter["error"]["category"] == "persistent"
    assert "state v2, written by a newer version" in letter["error"]["message"]
    assert "reads up to v1" in letter["error"]["message"]
    assert (json.loads(row["state"]), row["state_version"]) == (newer, 2)  # as v2 left it
    assert str(row["parked_on"]) == str(first.event_id) and parked == 1
    assert events_of(more, "test.task_done") == []


async def test_metrics_endpoint_reports_the_four_numbers(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    await publish(kafka_bootstrap, topic, [envelope(TaskSubmitted(task=f"m{i}")) for i in range(3)])
    await publish(kafka_bootstrap, topic, [envelope(TaskSubmitted(task="bad", mode="persistent"))])
    settings = ServiceSettings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False)
    async with running(make_spec(f"svc_{unique}"), settings, registry=registry) as runner:
        assert runner.http is not None
        url = f"http://127.0.0.1:{runner.http.port}/metrics"
        async with httpx.AsyncClient() as client:
            # Each partition's lag appears once a fetch has told the consumer its high
            # watermark: partition 0's, the one asserted below, may come after another's.
            lag = f'chorus_consumer_lag{{partition="0",topic="{topic}"}}'

            async def scraped() -> str | None:
                text = (await client.get(url)).text
                return text if "chorus_dead_letters_total" in text and lag in text else None

            text = await wait_until(scraped, what="metrics with lag and a dead letter")
    assert 'chorus_events_in_total{event_type="test.task_submitted"' in text
    assert "chorus_handle_seconds_bucket" in text
    assert 'chorus_failures_total{category="persistent",event_type="test.task_submitted"} 1.0' in text
    assert "chorus_outbox_backlog" in text


async def test_published_outbox_rows_are_purged_after_their_keep_time(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    name = f"svc_{unique}"
    await publish(kafka_bootstrap, topic, [envelope(TaskSubmitted(task=f"p{i}")) for i in range(5)])
    settings = ServiceSettings(
        kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False, outbox_keep_s=0
    )
    async with running(make_spec(name), settings, registry=registry):
        await read_topic(kafka_bootstrap, [topic], until=lambda rs: len(events_of(rs, "test.task_done")) >= 5)

        async def outbox_rows() -> int:
            return int(await pg.fetchval(f"SELECT count(*) FROM {name}.outbox"))

        await wait_until(lambda: _is_zero(outbox_rows()), timeout_s=30, what="published rows purged")
    assert await pg.fetchval(f"SELECT count(*) FROM {name}.inbox") == 5  # dedupe memory stays


async def _is_zero(value: Any) -> bool:
    return bool(await value == 0)
