"""At-least-once delivery in, one state change and one set of outputs out — the kernel's
promise, shown on both stores with the same records (no broker: the test plays it)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timezone
from typing import Any

import pytest

from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.platform import EventDiscarded
from chorus.contracts.registry import Registry
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.store import Checkpoint, InboxOutcome, Loaded, OutboxRow, StepWrite, Store
from chorus.testing import make_event
from tests.support.events import TaskSubmitted
from tests.support.kernel import KernelUnderTest, original_bytes
from tests.support.testservice import make_spec


@pytest.fixture
async def kernel(store: Store, registry: Registry, name: str) -> AsyncIterator[KernelUnderTest]:
    under_test = KernelUnderTest(make_spec(name, workflow_end=True), registry, store)
    yield under_test
    await under_test.close()


def task(workflow_id: str, text: str, **fields: Any) -> Envelope:
    event = make_event(TaskSubmitted(task=text, **fields), workflow_id=workflow_id)
    return event.envelope


async def state_of(kernel: KernelUnderTest, workflow_id: str) -> dict[str, Any] | None:
    (loaded,) = await kernel.store.load_many(kernel.identity.group, [(uuid.uuid4(), workflow_id)])
    return loaded.state.state if loaded.state is not None else None


async def done(kernel: KernelUnderTest) -> list[tuple[str, int]]:
    return [(e["payload"]["task"], e["payload"]["attempt"]) for e in await kernel.events("test.task_done")]


async def test_the_same_event_five_times_changes_state_once(kernel: KernelUnderTest) -> None:
    env = task("wf-1", "t1")
    await kernel.deliver(*[env] * 5)
    assert await done(kernel) == [("t1", 1)]
    assert (await state_of(kernel, "wf-1") or {})["handled"] == 1
    assert kernel.metrics.duplicates._value.get() == 4


async def test_a_transient_failure_retries_durably_and_the_next_event_waits_its_turn(
    kernel: KernelUnderTest,
) -> None:
    await kernel.deliver(task("wf-2", "first", transient_failures=1), task("wf-2", "second"))
    assert await done(kernel) == []  # the first waits for its retry; the second behind it
    await kernel.settle()  # the retry fires (the timer service's part)
    assert await done(kernel) == [("first", 2), ("second", 1)]
    assert (await state_of(kernel, "wf-2") or {})["tasks"] == ["first", "second"]


async def test_a_poison_record_is_dead_lettered_with_its_bytes_and_the_next_is_handled(
    kernel: KernelUnderTest,
) -> None:
    poison = b"\x00\xffnot json at all"
    topic = kernel.registry.physical_topic("test.task_submitted")
    record = kernel.record(poison, topic=topic, key=b"k1")
    await kernel.deliver(record, task("wf-3", "fine"))
    (letter,) = await kernel.events("event.dead_lettered")
    assert original_bytes(letter) == poison
    assert letter["payload"]["error"]["error_class"] == "NotJSONError"
    assert await done(kernel) == [("fine", 1)]
    await kernel.deliver(record)  # the same record again (offsets rewound)
    assert len(await kernel.events("event.dead_lettered")) == 1


async def test_a_crash_before_the_commit_leaves_nothing_and_the_redelivery_is_handled_once(
    kernel: KernelUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = kernel.store.commit_steps

    async def database_gone(writes: Sequence[StepWrite]) -> list[list[OutboxRow] | BaseException]:
        raise ConnectionError("PostgreSQL went away")

    monkeypatch.setattr(kernel.store, "commit_steps", database_gone)
    env = task("wf-4", "t1")
    with pytest.raises(ConnectionError):
        await kernel.deliver(env)
    assert await done(kernel) == [] and await state_of(kernel, "wf-4") is None
    monkeypatch.setattr(kernel.store, "commit_steps", real)
    await kernel.deliver(env, env)  # the edge never committed the offset: it comes again
    assert await done(kernel) == [("t1", 1)]


async def test_a_checkpoint_another_replica_moved_is_reloaded_never_overwritten(
    kernel: KernelUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    await kernel.deliver(task("wf-5", "t1"))
    real = kernel.store.commit_steps
    raced = False

    async def racing(writes: Sequence[StepWrite]) -> list[list[OutboxRow] | BaseException]:
        nonlocal raced
        if not raced:  # another replica's step lands between this one's load and commit
            raced = True
            (loaded,) = await kernel.store.load_many(kernel.identity.group, [(uuid.uuid4(), "wf-5")])
            await kernel.store.checkpoint(moved_on("wf-5", loaded))
        return await real(writes)

    monkeypatch.setattr(kernel.store, "commit_steps", racing)
    await kernel.deliver(task("wf-5", "t2"))
    state = await state_of(kernel, "wf-5") or {}
    assert state["tasks"] == ["t1", "elsewhere", "t2"]  # built on the other replica's step
    assert [t for t, _ in await done(kernel)] == ["t1", "t2"]


def moved_on(workflow_id: str, loaded: Loaded) -> Checkpoint:
    """The checkpoint's next revision, as another replica's step would write it."""
    assert loaded.state is not None and loaded.state.state is not None
    state = {**loaded.state.state, "tasks": [*loaded.state.state["tasks"], "elsewhere"]}
    return Checkpoint(
        workflow_id, "test", state, 1, loaded.state.revision, None, None, datetime.now(timezone.utc)
    )


async def test_a_step_resumes_after_its_last_checkpoint_when_retried(kernel: KernelUnderTest) -> None:
    await kernel.deliver(task("wf-6", "long", mode="steps"))
    await kernel.settle()
    state = await state_of(kernel, "wf-6") or {}
    assert state["step_calls"] == [1, 2, 3]  # steps 1 and 2 were not run again
    assert await done(kernel) == [("long", 2)]


async def test_after_the_workflow_ended_its_later_events_are_recorded_and_never_handled(
    kernel: KernelUnderTest,
) -> None:
    await kernel.deliver(task("wf-7", "t1"), ended("wf-7"), late := task("wf-7", "late"))
    assert await done(kernel) == [("t1", 1)]
    assert await outcome(kernel, late) == InboxOutcome.DROPPED
    assert kernel.metrics.dropped.labels("test.task_submitted")._value.get() == 1


async def test_a_dead_letter_holds_its_workflow_until_an_operator_discards_it(
    kernel: KernelUnderTest,
) -> None:
    bad = task("wf-8", "bad", mode="persistent")
    await kernel.deliver(bad, task("wf-8", "next"))
    (letter,) = await kernel.events("event.dead_lettered")
    assert json.loads(original_bytes(letter))["event_id"] == str(bad.event_id)
    assert await done(kernel) == []  # "next" is parked behind the dead letter
    await kernel.deliver(discard(kernel, bad))
    assert await done(kernel) == [("next", 1)]
    assert await outcome(kernel, bad) == InboxOutcome.DISCARDED


def ended(workflow_id: str) -> Envelope:
    return start_envelope(
        WorkflowEnded(outcome="cancelled", ended_by="gateway"),
        workflow_id=workflow_id,
        workflow_type="test",
        producer=ProducerRef(service="gateway", version="1"),
        now=datetime.now(timezone.utc),
        idempotency_key=f"end-{workflow_id}",
    )


def discard(kernel: KernelUnderTest, letter_of: Envelope) -> Envelope:
    msg = EventDiscarded(
        service=kernel.spec.name,
        consumer_group=kernel.identity.group,
        discarded_event_id=str(letter_of.event_id),
        reason="the input was wrong",
        actor="sam.operator",
    )
    return start_envelope(
        msg,
        workflow_id=letter_of.workflow_id,
        workflow_type="test",
        producer=ProducerRef(service="deadletter_service", version="1"),
        now=datetime.now(timezone.utc),
        idempotency_key=f"discard-{letter_of.event_id}",
    )


async def outcome(kernel: KernelUnderTest, env: Envelope) -> InboxOutcome | None:
    (loaded,) = await kernel.store.load_many(kernel.identity.group, [(env.event_id, env.workflow_id)])
    return loaded.inbox.outcome if loaded.inbox is not None else None
