"""Each step of the record path on its own, and the chain that runs them (memory store)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from chorus.base.errors import NewerStateError, PersistentError
from chorus.contracts.envelope import Envelope
from chorus.contracts.registry import Registry
from chorus.kernel.chain import MAX_AGAIN, Again, Chain, Done, Drain, Finish, Item, Via
from chorus.kernel.records import Record
from chorus.kernel.results import DeadLetter, Dropped, Review, Succeeded
from chorus.kernel.store import Claim, InboxOutcome
from chorus.testing import make_event
from chorus.testing.memory import MemoryStore
from tests.kernel.test_effectively_once import discard, ended
from tests.support.events import TaskDone, TaskSubmitted
from tests.support.kernel import KernelUnderTest
from tests.support.testservice import make_spec


@pytest.fixture
async def kernel(registry: Registry, name: str) -> AsyncIterator[KernelUnderTest]:
    under_test = KernelUnderTest(make_spec(name, workflow_end=True), registry, MemoryStore())
    yield under_test
    await under_test.close()


def memory(kernel: KernelUnderTest) -> MemoryStore:
    assert isinstance(kernel.store, MemoryStore)
    return kernel.store


def task(workflow_id: str = "wf", text: str = "t", **fields: object) -> Envelope:
    return make_event(TaskSubmitted(task=text, **fields), workflow_id=workflow_id).envelope  # type: ignore[arg-type]


async def through(kernel: KernelUnderTest, item: Item, *names: str) -> Item | Done | Again:
    """``item`` through the named kernel steps, in order, until one finishes or sends it back."""
    steps = {s.name: s for s in vars(kernel.steps).values()}
    out: Item | Done | Again = item
    for step_name in names:
        assert isinstance(out, Item)
        out = await steps[step_name](out)
    return out


UP_TO_HANDLE = ("decode", "route", "control", "load", "order", "handle")


# -- decode, route, control --------------------------------------------------------------


async def test_decode_turns_bytes_into_the_event_the_handler_reads(kernel: KernelUnderTest) -> None:
    env = task()
    item = await through(kernel, Item(kernel.record(env)), "decode")
    assert isinstance(item, Item) and item.event is not None
    assert isinstance(item.event.payload, TaskSubmitted) and item.event.envelope.event_id == env.event_id


async def test_decode_dead_letters_what_is_not_an_event_and_lets_go_of_a_parked_copy(
    kernel: KernelUnderTest,
) -> None:
    topic = kernel.registry.physical_topic("test.task_submitted")
    claim = Claim(kernel.identity.group, uuid.uuid4(), 1, InboxOutcome.PARKED, "x", "wf", kernel.clock.now())
    record = kernel.record(b'{"event_type": "no.such"}', topic=topic)
    await memory(kernel).park(claim, record)
    (parked_id,) = memory(kernel).parked
    out = await through(kernel, Item(record, via=Via.DRAIN, parked_id=parked_id), "decode")
    assert out == Done(Finish.DEAD_LETTERED)
    assert memory(kernel).parked == {}
    (letter,) = await kernel.events("event.dead_lettered")
    assert letter["payload"]["error"]["error_class"] == "UnknownEventTypeError"


async def test_route_passes_on_this_services_events_and_finishes_anyone_elses(
    kernel: KernelUnderTest,
) -> None:
    mine = await through(kernel, Item(kernel.record(task())), "decode", "route")
    assert isinstance(mine, Item) and mine.route is not None
    produced = make_event(TaskDone(task="t", attempt=1, handled_count=1)).envelope  # read by others only
    assert await through(kernel, Item(kernel.record(produced)), "decode", "route") == Done(Finish.NOT_OURS)


async def test_a_control_message_for_another_service_is_not_ours(kernel: KernelUnderTest) -> None:
    message = discard(kernel, task())
    other = message.model_copy(update={"payload": {**message.payload, "service": "another_service"}})
    assert await through(kernel, Item(kernel.record(other)), "decode", "route") == Done(Finish.NOT_OURS)


async def test_a_durable_retry_submits_its_original_at_the_head_as_the_next_attempt(
    kernel: KernelUnderTest,
) -> None:
    await kernel.deliver(task("wf-r", "x", transient_failures=1))
    (retry,) = await kernel.bus()
    out = await through(kernel, Item(retry), "decode", "route", "control")
    assert isinstance(out, Done) and out.finish is Finish.CONTROL
    (original,) = out.then
    assert isinstance(original, Item) and (original.via, original.attempt) == (Via.RETRY, 2)
    assert len(original.failures) == 1 and original.failures[0].error_class == "TransientError"


# -- load, order ---------------------------------------------------------------------------


async def test_load_skips_an_event_finished_before(kernel: KernelUnderTest) -> None:
    env = task()
    await kernel.deliver(env)
    out = await through(kernel, Item(kernel.record(env)), "decode", "route", "control", "load")
    assert out == Done(Finish.SKIPPED)


async def test_order_parks_an_event_while_its_workflow_waits_on_an_earlier_one(
    kernel: KernelUnderTest,
) -> None:
    await kernel.deliver(task("wf-o", "first", transient_failures=1))
    later = task("wf-o", "later")
    out = await through(kernel, Item(kernel.record(later)), *UP_TO_HANDLE[:-1])
    assert out == Done(Finish.PARKED)
    assert memory(kernel).outcome(kernel.identity.group, later.event_id) == InboxOutcome.PARKED


async def test_order_finishes_an_interrupted_drain_before_a_new_event_overtakes_it(
    kernel: KernelUnderTest,
) -> None:
    await kernel.deliver(task("wf-d", "first", transient_failures=1), task("wf-d", "parked"))
    await memory(kernel).discard(
        group=kernel.identity.group,
        event_id=memory(kernel).state["wf-d"].parked_on or uuid.uuid4(),
        workflow_id="wf-d",
        now=kernel.clock.now(),
    )  # the workflow stopped waiting; a crash came before its drain
    new = Item(kernel.record(task("wf-d", "new")))
    out = await through(kernel, new, "decode", "route", "control", "load", "order")
    assert isinstance(out, Done) and out.finish is Finish.DEFERRED
    drain, again = out.then
    assert drain == Drain("wf-d") and isinstance(again, Item) and again.at == "load"


# -- handle, commit ------------------------------------------------------------------------


async def test_handle_drops_an_event_of_a_workflow_that_ended(kernel: KernelUnderTest) -> None:
    await kernel.deliver(ended("wf-e"))
    out = await through(kernel, Item(kernel.record(task("wf-e"))), *UP_TO_HANDLE)
    assert isinstance(out, Item) and isinstance(out.result, Dropped)


async def test_handle_refuses_a_checkpoint_written_by_a_newer_version(kernel: KernelUnderTest) -> None:
    await kernel.deliver(task("wf-n"))
    memory(kernel).state["wf-n"].state_version = 2
    out = await through(kernel, Item(kernel.record(task("wf-n"))), *UP_TO_HANDLE)
    assert isinstance(out, Item) and isinstance(out.result, DeadLetter)
    assert isinstance(out.result.error, NewerStateError) and out.frame is not None
    assert out.frame.state_version == 2  # written back exactly as stored


async def test_a_checkpoint_publishes_what_the_step_says_so_far_before_its_outcome(
    kernel: KernelUnderTest,
) -> None:
    env = task("wf-p", "long", mode="progress")
    await kernel.deliver(env)
    said = await kernel.events("test.task_done")
    assert [e["payload"]["task"] for e in said] == ["long: step 1 of 2", "long: step 2 of 2", "long"]
    assert len({e["event_id"] for e in said}) == 3  # each an event of its own
    assert {e["causation_id"] for e in said} == {str(env.event_id)}
    kept = memory(kernel).state["wf-p"].state
    assert kept is not None and kept["steps_done"] == [1, 2]


async def test_handle_asks_a_person_after_the_semantic_retries(kernel: KernelUnderTest) -> None:
    out = await through(kernel, Item(kernel.record(task(mode="semantic"))), *UP_TO_HANDLE)
    assert isinstance(out, Item) and isinstance(out.result, Review)
    assert len(out.result.errors) == 3  # the route's semantic_attempts, each one's feedback


async def test_commit_of_a_step_that_resolves_a_wait_drains_what_waited(kernel: KernelUnderTest) -> None:
    await kernel.deliver(bad := task("wf-c", "bad", mode="persistent"))
    out = await through(kernel, Item(kernel.record(discard(kernel, bad))), "decode", "route", "control")
    assert out == Done(Finish.CONTROL, then=(Drain("wf-c"),))


async def test_commit_sends_the_item_back_to_load_when_the_checkpoint_moved(kernel: KernelUnderTest) -> None:
    await kernel.deliver(task("wf-m"))
    item = await through(kernel, Item(kernel.record(task("wf-m", "2"))), *UP_TO_HANDLE)
    memory(kernel).state["wf-m"].revision += 1  # another replica's step
    assert isinstance(item, Item) and isinstance(item.result, Succeeded)
    assert await kernel.steps.commit(item) == Again("load")


# -- the chain -------------------------------------------------------------------------------


@dataclass
class Scripted:
    """A step that answers from a script, and notes what it saw."""

    name: str
    script: list[Item | Done | Again | None]
    seen: list[Record] = field(default_factory=list)

    async def __call__(self, item: Item) -> Item | Done | Again:
        self.seen.append(item.record)
        answer = self.script.pop(0) if self.script else None
        return item if answer is None else answer


@dataclass
class NoParked:
    items: dict[str, list[Item]] = field(default_factory=dict)

    async def next_item(self, workflow_id: str) -> Item | None:
        queue = self.items.get(workflow_id, [])
        return queue.pop(0) if queue else None


def rec(offset: int) -> Record:
    return Record("t", 0, offset, b"k", b"{}")


async def test_the_chain_runs_what_a_finished_item_brings_next_in_order_and_drains_to_the_end() -> None:
    parked = NoParked({"wf": [Item(rec(2)), Item(rec(3))]})
    first = Scripted("first", [Done(Finish.COMMITTED, then=(Item(rec(1)), Drain("wf")))])
    last = Scripted("last", [Done(Finish.COMMITTED)] * 4)
    await Chain(first, last, parked=parked).run(rec(0))
    assert [r.offset for r in first.seen] == [0, 1, 2, 3]
    assert [r.offset for r in last.seen] == [1, 2, 3]


async def test_again_runs_the_item_from_the_named_step_and_gives_up_past_the_limit() -> None:
    head = Scripted("head", [])
    load = Scripted("load", [])
    tail = Scripted("tail", [Again("load"), Done(Finish.COMMITTED)])
    await Chain(head, load, tail, parked=NoParked()).run(rec(0))
    assert (len(head.seen), len(load.seen), len(tail.seen)) == (1, 2, 2)
    stuck = Scripted("tail", [Again("load")] * (MAX_AGAIN + 1))
    decoded = Item(rec(0), event=make_event(TaskSubmitted(task="x")))
    with pytest.raises(RuntimeError, match="conflicting updates"):
        await Chain(Scripted("head", [decoded]), load, stuck, parked=NoParked()).run(rec(0))


async def test_an_outcome_that_cannot_be_published_is_the_records_dead_letter(
    kernel: KernelUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(*_: object) -> object:
        raise PersistentError("a value the store refuses")

    monkeypatch.setattr(kernel.steps.commit.messages, "outcome", refuse)
    await kernel.deliver(task("wf-p"))
    (letter,) = await kernel.events("event.dead_lettered")
    assert "refuses" in letter["payload"]["error"]["message"]
    assert await kernel.events("test.task_done") == []
