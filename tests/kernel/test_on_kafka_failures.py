"""Failure routing: durable retries with backoff, dead letters, human review, ordering."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from chorus.base.clock import OffsetFileClock
from chorus.base.compat import fromisoformat
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.registry import Registry
from chorus.kernel.backoff import backoff_cap
from chorus.platform.timer_service.config import Settings as TimerSettings
from chorus.platform.timer_service.service import SPEC as TIMER_SPEC
from chorus.runtime.runner import ServiceRunner, ServiceSettings, running
from tests.support.events import TaskSubmitted
from tests.support.kafka import envelope, events_of, publish, read_topic, stated_by
from tests.support.onkafka import in_process
from tests.support.registry import isolated_registry
from tests.support.sealed import opened
from tests.support.testservice import make_spec
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


@dataclass
class Stack:
    registry: Registry
    runner: ServiceRunner
    kafka: str

    async def submit(self, task: TaskSubmitted) -> Envelope:
        """Publish one task in a workflow of its own."""
        env = envelope(task)
        await publish(self.kafka, self.registry.physical_topic("test.task_submitted"), [env])
        return env

    async def read_until(self, workflow_id: str, wanted: str, *also: str) -> list[Any]:
        """The records of the topics of ``wanted`` and ``also`` (event types), read until
        a ``wanted`` of ``workflow_id`` shows."""
        return await read_topic(
            self.kafka,
            [self.registry.physical_topic(t) for t in (wanted, *also)],
            until=lambda rs: bool(payloads(rs, wanted, workflow_id)),
        )

    async def first(self, task: TaskSubmitted, wanted: str) -> tuple[Envelope, dict[str, Any]]:
        """``task`` submitted; its envelope and the payload of its workflow's first ``wanted``."""
        env = await self.submit(task)
        records = await self.read_until(env.workflow_id, wanted)
        return env, payloads(records, wanted, env.workflow_id)[0]["payload"]


async def start_stack(
    stack: AsyncExitStack,
    tmp_path: Path,
    unique: str,
    kafka: str,
    db: str,
    *,
    clock: str = "system",
    task_timeout_s: float = 600,
) -> Stack:
    registry = await isolated_registry(tmp_path, unique, kafka)
    common = in_process(kafka, db, clock=clock)
    await stack.enter_async_context(
        running(
            TIMER_SPEC,
            TimerSettings(**common, group_id=f"timers-{unique}", max_idle_s=0.1),
            registry=registry,
        )
    )
    runner = await stack.enter_async_context(
        running(
            make_spec(f"svc_{unique}", task_timeout_s=task_timeout_s, workflow_end=True),
            ServiceSettings(**common),
            registry=registry,
        )
    )
    return Stack(registry, runner, kafka)


@pytest.fixture
async def services(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> AsyncIterator[Stack]:
    """The test service and the timer service on the test's own topics, on the system clock."""
    async with AsyncExitStack() as stack:
        yield await start_stack(stack, tmp_path, unique, kafka_bootstrap, database_url)


def payloads(records: list[Any], event_type: str, workflow_id: str) -> list[dict[str, Any]]:
    return [e for e in events_of(records, event_type) if e["workflow_id"] == workflow_id]


async def test_transient_twice_then_success_on_attempt_three(services: Stack) -> None:
    env = await services.submit(TaskSubmitted(task="flaky", transient_failures=2))
    records = await services.read_until(
        env.workflow_id, "test.task_done", "timer.schedule", "event.dead_lettered"
    )
    done = payloads(records, "test.task_done", env.workflow_id)
    assert [d["payload"]["attempt"] for d in done] == [3]
    assert payloads(records, "event.dead_lettered", env.workflow_id) == []

    retries = [
        e for e in payloads(records, "timer.schedule", env.workflow_id) if e["payload"]["purpose"] == "retry"
    ]
    assert len(retries) == 2
    waits = []
    for n, schedule in enumerate(retries, start=1):
        due = fromisoformat(schedule["payload"]["due_at"])
        at = fromisoformat(schedule["occurred_at"])
        wait = (due - at).total_seconds()
        fired = schedule["payload"]["fire"]["value"]["payload"]
        assert fired["attempt"] == n + 1
        assert fired["failures"][-1]["retry_in_s"] == pytest.approx(wait, abs=1e-3)
        # Full jitter: each wait is drawn from [0, base * 2^(n-1)], a window that doubles.
        assert 0 <= wait <= backoff_cap(n, 0.2, 5.0) + 1e-6
        waits.append(wait)
    assert backoff_cap(2, 0.2, 5.0) == 2 * backoff_cap(1, 0.2, 5.0)
    assert len(set(waits)) == 2, "jittered waits should differ"


async def test_a_handler_past_its_task_timeout_is_retried_durably_then_dead_lettered(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    """Task tier, under the shared simulated clock: a call that would take two hours against
    a one-hour task timeout. Each attempt ends when the clock passes the hour, a durable
    timer retries it, and the fourth (max_attempts) is dead-lettered. In real time this
    would take four hours; the test moves the clock half an hour every 0.2 s."""
    clock_file = tmp_path / "clock"
    async with AsyncExitStack() as stack:
        s = await start_stack(
            stack,
            tmp_path,
            unique,
            kafka_bootstrap,
            database_url,
            clock=f"offset-file:{clock_file}",
            task_timeout_s=3600,
        )

        async def time_passes() -> None:
            while True:
                await asyncio.sleep(0.2)
                OffsetFileClock.advance(clock_file, 1800)

        clock = asyncio.create_task(time_passes())
        try:
            env = await s.submit(TaskSubmitted(task="hung LLM call", mode="slow", sleep_s=7200))
            records = await s.read_until(
                env.workflow_id, "event.dead_lettered", "test.task_done", "timer.schedule"
            )
        finally:
            clock.cancel()
    letter = payloads(records, "event.dead_lettered", env.workflow_id)[0]["payload"]
    assert letter["attempts"] == 4
    assert letter["error"]["category"] == "transient"
    assert "longer than its 3600s timeout" in letter["error"]["message"]
    assert [f["error_class"] for f in letter["failures"]] == ["HandlerTimeoutError"] * 4
    retries = [
        e for e in payloads(records, "timer.schedule", env.workflow_id) if e["payload"]["purpose"] == "retry"
    ]
    assert [r["payload"]["fire"]["value"]["payload"]["attempt"] for r in retries] == [2, 3, 4]
    assert payloads(records, "test.task_done", env.workflow_id) == []


async def test_a_workflow_that_ends_stops_its_timers_and_later_events_are_recorded_not_handled(
    services: Stack, kafka_bootstrap: str, pg: asyncpg.Connection, unique: str
) -> None:
    """Workflow end, in the runtime: the workflow schedules a reminder, then parks behind a
    dead letter with one event waiting; its workflow.ended overtakes the park. The waiting
    event and one arriving after the end are recorded in the inbox as dropped, never
    handled (no task_done, no handler's effects); the reminder timer is cancelled."""
    topic = services.registry.physical_topic("test.task_submitted")
    remind = envelope(TaskSubmitted(task="remind", mode="remind"))
    wf = remind.workflow_id
    blocker = envelope(TaskSubmitted(task="blocker", mode="persistent"), workflow_id=wf)
    waiting = envelope(TaskSubmitted(task="waiting"), workflow_id=wf)
    await publish(kafka_bootstrap, topic, [remind, blocker, waiting])
    await services.read_until(wf, "event.dead_lettered")
    # The end of a workflow is a signed fact: stated here by the gateway, which signs it.
    ended = stated_by(
        envelope(WorkflowEnded(outcome="timed_out", reason="deadline", ended_by="gateway"), workflow_id=wf),
        "gateway",
    )
    await publish(kafka_bootstrap, services.registry.physical_topic("workflow.ended"), [ended])
    after = envelope(TaskSubmitted(task="after"), workflow_id=wf)
    await publish(kafka_bootstrap, topic, [after])
    # A different end crossing the first (a completion after a timeout): the first stands.
    crossed = stated_by(
        envelope(WorkflowEnded(outcome="completed", ended_by="payment_agent"), workflow_id=wf),
        "payment_agent",
    )
    await publish(kafka_bootstrap, services.registry.physical_topic("workflow.ended"), [crossed])
    schema = f"svc_{unique}"

    async def inbox() -> dict[str, str]:
        rows = await pg.fetch(f"SELECT event_id, outcome FROM {schema}.inbox WHERE workflow_id = $1", wf)
        return {str(r["event_id"]): r["outcome"] for r in rows}

    async def reminder() -> Any:
        return await pg.fetchrow(
            """SELECT status, cancel_reason FROM timer_service.timers
                WHERE workflow_id = $1 AND purpose = 'reminder' AND status <> 'pending'""",
            wf,
        )

    await wait_until(
        lambda: _dropped(inbox(), waiting.event_id, after.event_id, crossed.event_id),
        what="the events after the end dropped",
    )
    timer = await wait_until(reminder, what="the reminder cancelled")
    outcomes = await inbox()
    checkpoint = await pg.fetchrow(f"SELECT ended, parked_on FROM {schema}.state WHERE workflow_id = $1", wf)
    records = await read_topic(
        kafka_bootstrap, [topic], until=lambda rs: bool(payloads(rs, "test.task_done", wf))
    )
    assert outcomes[str(remind.event_id)] == "done"
    assert outcomes[str(blocker.event_id)] == "dead_lettered"
    assert outcomes[str(waiting.event_id)] == "dropped"
    assert outcomes[str(after.event_id)] == "dropped"
    assert outcomes[str(ended.event_id)] == "done"
    assert checkpoint["ended"] == "timed_out" and checkpoint["parked_on"] is None
    assert await pg.fetchval(f"SELECT count(*) FROM {schema}.parked WHERE workflow_id = $1", wf) == 0
    assert [d["payload"]["task"] for d in payloads(records, "test.task_done", wf)] == ["remind"]
    assert timer["status"] == "cancelled"
    assert timer["cancel_reason"] == "workflow ended (timed_out)"


async def _dropped(rows: Any, *event_ids: Any) -> bool:
    """Whether the inbox says dropped for every one (either may be parked before the end)."""
    outcomes = await rows
    return all(outcomes.get(str(event_id)) == "dropped" for event_id in event_ids)


async def test_persistent_error_dead_letters_at_once_with_full_context(services: Stack) -> None:
    topic = services.registry.physical_topic("test.task_submitted")
    env, letter = await services.first(
        TaskSubmitted(task="rejected", mode="persistent"), "event.dead_lettered"
    )
    assert letter["attempts"] == 1
    assert letter["error"]["category"] == "persistent"
    assert "business rule" in letter["error"]["message"]
    assert "PersistentError" in letter["error"]["traceback"]
    assert opened(letter["original"])["topic"] == topic
    assert json.loads(base64.b64decode(opened(letter["original"])["value_b64"]))["event_id"] == str(
        env.event_id
    )
    assert letter["original_event_id"] == str(env.event_id)
    assert len(letter["failures"]) == 1


async def test_unexpected_exception_is_retried_with_a_cap_then_dead_lettered(services: Stack) -> None:
    _, letter = await services.first(TaskSubmitted(task="buggy", mode="unexpected"), "event.dead_lettered")
    assert letter["attempts"] == 3
    assert letter["error"]["category"] == "unexpected"
    assert [f["error_class"] for f in letter["failures"]] == ["ZeroDivisionError"] * 3
    assert [f["attempt"] for f in letter["failures"]] == [1, 2, 3]


async def test_semantic_failures_rerun_with_feedback_then_ask_a_person(services: Stack) -> None:
    env, review = await services.first(TaskSubmitted(task="vague", mode="semantic"), "review.requested")
    assert review["attempts"] == 3
    # Each re-run saw the errors of the runs before it.
    assert review["validation_errors"] == [f"/summary: missing (try {n})" for n in (1, 2, 3)]
    assert review["original_event_id"] == str(env.event_id)


async def test_later_events_wait_behind_a_retrying_event_of_their_workflow(
    services: Stack, kafka_bootstrap: str
) -> None:
    topic = services.registry.physical_topic("test.task_submitted")
    first = envelope(TaskSubmitted(task="first", transient_failures=1))
    wf = first.workflow_id
    second = envelope(TaskSubmitted(task="second"), workflow_id=wf)
    third = envelope(TaskSubmitted(task="third"), workflow_id=wf)
    await publish(kafka_bootstrap, topic, [first, second, third])
    records = await read_topic(
        kafka_bootstrap, [topic], until=lambda rs: len(payloads(rs, "test.task_done", wf)) >= 3
    )
    done = payloads(records, "test.task_done", wf)
    assert [d["payload"]["task"] for d in done] == ["first", "second", "third"]
    assert [d["payload"]["handled_count"] for d in done] == [1, 2, 3]


async def test_a_redriven_dead_letter_runs_first_then_the_events_parked_behind_it(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    name = f"svc_{unique}"
    common = in_process(kafka_bootstrap, database_url)
    poison = envelope(TaskSubmitted(task="blocker", mode="persistent"))
    wf = poison.workflow_id
    later = envelope(TaskSubmitted(task="later"), workflow_id=wf)
    await publish(kafka_bootstrap, topic, [poison, later])
    async with running(make_spec(name), ServiceSettings(**common), registry=registry):
        await read_topic(
            kafka_bootstrap,
            [registry.physical_topic("event.dead_lettered")],
            until=lambda rs: bool(payloads(rs, "event.dead_lettered", wf)),
        )
    # The fixed deploy receives the redriven copy (same event id, next attempt), as the
    # dead-letter service sends it; "later" has waited parked behind it all along.
    redriven = poison.model_copy(update={"attempt": 2})
    async with running(make_spec(name, fixed=True), ServiceSettings(**common), registry=registry):
        await publish(kafka_bootstrap, topic, [redriven])
        records = await read_topic(
            kafka_bootstrap, [topic], until=lambda rs: len(payloads(rs, "test.task_done", wf)) >= 2
        )
    done = payloads(records, "test.task_done", wf)
    assert [d["payload"]["task"] for d in done] == ["blocker", "later"]
    assert done[0]["payload"]["attempt"] == 2


async def test_a_bad_deploy_that_dead_letters_everything_is_stopped_by_the_guard(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    await publish(
        kafka_bootstrap, topic, [envelope(TaskSubmitted(task=f"b{i}", mode="persistent")) for i in range(30)]
    )
    name = f"svc_{unique}"
    settings = ServiceSettings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        log_json=False,
        dead_letter_guard_consecutive=10,
    )
    async with running(make_spec(name), settings, registry=registry) as runner:
        await wait_until(lambda: runner.fatal is not None, what="the guard to stop the consumer")
        assert "dead-letter guard tripped" in str(runner.fatal)
        assert (await runner.health())["status"] == "failing"
    dead = await pg.fetchval(f"SELECT count(*) FROM {name}.inbox WHERE outcome = 'dead_lettered'")
    assert dead == 10  # the 11th was not written: it waits, uncommitted, for the fixed deploy


async def test_a_flood_of_poison_input_does_not_trip_the_guard(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    await publish(kafka_bootstrap, topic, [f"junk {i}".encode() for i in range(30)], key=b"junk")
    good = envelope(TaskSubmitted(task="after-the-flood"))
    await publish(kafka_bootstrap, topic, [good])
    settings = ServiceSettings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        log_json=False,
        dead_letter_guard_consecutive=10,
    )
    async with running(make_spec(f"svc_{unique}"), settings, registry=registry) as runner:
        records = await read_topic(
            kafka_bootstrap,
            [topic, registry.physical_topic("event.dead_lettered")],
            until=lambda rs: (
                len(events_of(rs, "event.dead_lettered")) >= 30 and bool(events_of(rs, "test.task_done"))
            ),
        )
        assert runner.fatal is None
    assert len(events_of(records, "event.dead_lettered")) == 30


async def test_an_event_a_timer_fires_carries_the_headers_every_event_carries(
    services: Stack, kafka_bootstrap: str
) -> None:
    env = await services.submit(TaskSubmitted(task="retried once", transient_failures=1))
    control = services.registry.physical_topic("retry.due")
    records = await read_topic(
        kafka_bootstrap,
        [control],
        until=lambda rs: any(r.key == env.workflow_id.encode() for r in rs),
    )
    [fired] = [r for r in records if r.key == env.workflow_id.encode()]
    headers = dict(fired.headers)
    assert headers["event_type"] == b"retry.due"
    assert headers["schema_version"] == b"1"
    assert headers["traceparent"].decode() == json.loads(fired.value)["traceparent"]
