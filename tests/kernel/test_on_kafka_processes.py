"""The runtime as a real process: crashes between commits, long handlers, shutdown, tracing."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from chorus.runtime.runner import ServiceSettings, running
from tests.support.events import TaskSubmitted
from tests.support.kafka import envelope, events_of, publish, read_topic
from tests.support.onkafka import in_process
from tests.support.processes import ServiceProcess, infra_env
from tests.support.registry import isolated_registry
from tests.support.testservice import make_spec
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


async def test_sigkill_between_db_commit_and_offset_commit_loses_and_duplicates_nothing(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    envs = [envelope(TaskSubmitted(task=f"t{i}")) for i in range(20)]
    await publish(kafka_bootstrap, topic, envs)
    env = {**infra_env(registry.root, kafka_bootstrap, database_url), "TEST_SERVICE_NAME": f"svc_{unique}"}
    service = ServiceProcess("tests.support.testservice", env, tmp_path)
    with service:
        # The 5th outcome commits in PostgreSQL, then the process dies before any offset commit.
        service.start(CHORUS_FAULTS="after_db_commit:5", CHORUS_COMMIT_INTERVAL_S="30")
        assert await service.wait_exit() == -signal.SIGKILL
        service.start()
        records = await read_topic(
            kafka_bootstrap,
            [topic],
            until=lambda rs: len({e["event_id"] for e in events_of(rs, "test.task_done")}) >= 20,
        )
        await service.terminate()
    done = events_of(records, "test.task_done")
    by_task = Counter(d["payload"]["task"] for d in {d["event_id"]: d for d in done}.values())
    assert by_task == Counter(f"t{i}" for i in range(20))  # none lost, none twice
    # Every record that is on the topic more than once is the same event (same id):
    # the relay republished it, and consumers' inboxes drop the copy.
    assert len({d["payload"]["task"] for d in done}) == 20


async def test_handler_blocked_for_twice_max_poll_interval_causes_no_rebalance(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    slow = envelope(TaskSubmitted(task="slow", mode="slow", sleep_s=8.0))
    quick = envelope(TaskSubmitted(task="quick"))
    await publish(kafka_bootstrap, topic, [slow, quick])
    settings = ServiceSettings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        log_json=False,
        max_poll_interval_ms=4000,  # the handler takes twice as long
        session_timeout_ms=6000,
    )
    async with running(make_spec(f"svc_{unique}"), settings, registry=registry) as runner:
        records = await read_topic(
            kafka_bootstrap, [topic], until=lambda rs: len(events_of(rs, "test.task_done")) >= 2
        )
        assert runner.edge is not None
        rebalances = runner.edge.rebalances
    done = events_of(records, "test.task_done")
    assert sorted(d["payload"]["task"] for d in done) == ["quick", "slow"]
    # The quick one (another workflow) did not wait behind the slow one.
    assert [d["payload"]["task"] for d in done] == ["quick", "slow"]
    assert rebalances <= 1  # the initial join only


async def test_trace_id_of_the_first_event_is_on_every_later_event(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    from chorus.platform.timer_service.config import Settings as TimerSettings
    from chorus.platform.timer_service.service import SPEC as TIMER_SPEC

    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    env = envelope(
        TaskSubmitted(task="traced", transient_failures=1),
        traceparent=f"00-{trace_id}-00f067aa0ba902b7-01",
    )
    await publish(kafka_bootstrap, topic, [env])
    common = in_process(kafka_bootstrap, database_url)
    async with (
        running(
            TIMER_SPEC,
            TimerSettings(**common, group_id=f"timers-{unique}", max_idle_s=0.1),
            registry=registry,
        ),
        running(make_spec(f"svc_{unique}"), ServiceSettings(**common), registry=registry),
    ):
        timers = registry.physical_topic("timer.schedule")
        control = registry.physical_topic("retry.due")
        records = await read_topic(
            kafka_bootstrap,
            [topic, timers, control],
            until=lambda rs: bool(events_of(rs, "test.task_done")),
        )
    later = [
        r
        for r in records
        if r.value and b'"event_type"' in r.value and str(env.event_id).encode() not in r.value[:80]
    ]
    kinds: Counter[str] = Counter()
    for event_type in ("timer.schedule", "retry.due", "test.task_done"):
        for e in events_of(later, event_type):
            assert e["traceparent"].split("-")[1] == trace_id, e
            kinds[event_type] += 1
    assert kinds == Counter({"timer.schedule": 1, "retry.due": 1, "test.task_done": 1})
    for r in later:
        headers = dict(r.headers)
        if b"test.task_done" in r.value:
            assert headers["traceparent"].decode().split("-")[1] == trace_id


async def test_sigterm_finishes_in_flight_work_and_leaves_the_group(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    env = {**infra_env(registry.root, kafka_bootstrap, database_url), "TEST_SERVICE_NAME": f"svc_{unique}"}
    service = ServiceProcess("tests.support.testservice", env, tmp_path)
    with service:
        service.start()
        await service.wait_healthy()
        async with httpx.AsyncClient() as client:
            health = (await client.get(f"{service.url}/health")).json()
            assert health["status"] == "ok"
        await publish(
            kafka_bootstrap, topic, [envelope(TaskSubmitted(task="long", mode="slow", sleep_s=3.0))]
        )
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                metrics = (await client.get(f"{service.url}/metrics")).text
                if "chorus_in_flight 1.0" in metrics:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the slow handler never started")
        # SIGTERM while the handler runs: it must finish, publish and commit before exit.
        assert await service.terminate() == 0
    records = await read_topic(
        kafka_bootstrap, [topic], until=lambda rs: bool(events_of(rs, "test.task_done"))
    )
    assert [d["payload"]["task"] for d in events_of(records, "test.task_done")] == ["long"]
    assert "service stopped" in service.tail(200)


@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
async def test_a_static_member_restarted_within_the_session_timeout_rebalances_no_one(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str, static: bool
) -> None:
    """Two replicas; one stops and is back within the session timeout. As static members
    (CHORUS_STATIC_MEMBERSHIP) the other keeps working through it with no rebalance and the
    one back gets its own partitions again; as dynamic ones (the default) both rebalance."""
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap, partitions=4)
    topic = registry.physical_topic("test.task_submitted")
    spec = make_spec(f"svc_{unique}")

    def replica(instance: str) -> ServiceSettings:
        return ServiceSettings(
            **in_process(kafka_bootstrap, database_url),
            instance=instance,
            static_membership=static,
            session_timeout_ms=30_000,
            heartbeat_interval_ms=1_000,
        )

    def done_tasks(records: list[Any]) -> set[str]:
        return {d["payload"]["task"] for d in events_of(records, "test.task_done")}

    async with running(spec, replica("b"), registry=registry) as other:
        async with running(spec, replica("a"), registry=registry) as first:
            await wait_until(lambda: both_assigned(first, other), what="both replicas assigned")
            assert first.edge is not None and other.edge is not None
            before = (other.edge.rebalances, first.edge.assignment)
        await publish(kafka_bootstrap, topic, [envelope(TaskSubmitted(task=f"t{i}")) for i in range(8)])
        async with running(spec, replica("a"), registry=registry) as again:
            await wait_until(lambda: both_assigned(again, other), what="both replicas assigned again")
            assert again.edge is not None
            records = await read_topic(kafka_bootstrap, [topic], until=lambda rs: len(done_tasks(rs)) >= 8)
            after = (other.edge.rebalances, again.edge.assignment)
    assert done_tasks(records) == {f"t{i}" for i in range(8)}
    if static:
        assert after == before  # the same partitions back, and the other never rebalanced
    else:
        assert after[0] > before[0]


async def both_assigned(*runners: Any) -> bool:
    return all(r.edge is not None and r.edge.assignment for r in runners)
