"""Two releases of one service in one runtime test: who owns a workflow (chorus.releases.pinning).

Both releases read every event, each in its own consumer group; the checkpoint row they
share says which release a workflow is pinned to.
"""

from __future__ import annotations

import json
import uuid
from contextlib import AsyncExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from chorus.base.clock import SystemClock
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.rollouts import RepinRequested, RolloutChanged
from chorus.kernel.answering import Answering
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.outbox import OutboxWriter
from chorus.kernel.store.postgres import ServiceStore
from chorus.releases.repin import Repins
from chorus.releases.rollouts import MAIN_RELEASE, ROLLOUT_WORKFLOW_TYPE, RolloutView, rollout_workflow_id
from chorus.releases.store import PinStore
from chorus.runtime.runner import ServiceRunner, ServiceSettings, running
from tests.support.events import TaskSubmitted
from tests.support.kafka import envelope, publish, read_topic
from tests.support.onkafka import in_process
from tests.support.registry import isolated_registry
from tests.support.testservice import make_spec
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

UNNAMED = MAIN_RELEASE  # the release in the service's own group
NEW = "0.2.0"


def policy(service: str, revision: int, **fields: Any) -> Envelope:
    body = RolloutChanged(service=service, revision=revision, changed_by="ops.test", **fields)
    return start_envelope(
        body,
        workflow_id=rollout_workflow_id(service),
        workflow_type=ROLLOUT_WORKFLOW_TYPE,
        producer=ProducerRef(service="rollout_service", version="0.1.0"),
        now=datetime.now(timezone.utc),
        idempotency_key=f"{service}:{revision}",
    )


def repin_request(workflow_id: str, to: str, from_release: str | None, service: str) -> Envelope:
    """What the rollout service publishes when an operator moves a workflow."""
    asked = RepinRequested(
        service=service,
        to_release=to,
        from_release=from_release,
        requested_by="ops.test",
        reason="the canary is being removed",
    )
    return start_envelope(
        asked,
        workflow_id=workflow_id,
        workflow_type="test",
        producer=ProducerRef(service="rollout_service", version="0.1.0"),
        now=datetime.now(timezone.utc),
        idempotency_key=str(uuid.uuid4()),
    )


async def follows(runners: list[ServiceRunner], service: str, revision: int) -> None:
    def revision_of(runner: ServiceRunner) -> int | None:
        found = runner.rollouts.policy(service)
        return found.revision if found is not None else None

    await wait_until(
        lambda: all(revision_of(r) == revision for r in runners),
        timeout_s=30,
        what=f"both releases following revision {revision}",
    )


async def test_each_workflow_is_handled_by_the_release_it_is_pinned_to_and_the_other_passes(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    name = f"svc_{unique}"
    task_topic = registry.physical_topic("test.task_submitted")
    rollouts_topic = registry.topic_for("rollout.changed").topic
    common = in_process(kafka_bootstrap, database_url)
    async with AsyncExitStack() as stack:
        unnamed = await stack.enter_async_context(
            running(make_spec(name), ServiceSettings(**common), registry=registry)
        )
        named = await stack.enter_async_context(
            running(make_spec(name), ServiceSettings(**common, release=NEW), registry=registry)
        )
        assert (unnamed.group, named.group) == (name, f"{name}.{NEW}")

        # No policy yet: the unnamed release owns whatever carries no pin; a pin decides the rest.
        legacy = envelope(TaskSubmitted(task="legacy"))
        pinned = envelope(TaskSubmitted(task="pinned")).model_copy(update={"pins": {name: NEW}})
        await publish(kafka_bootstrap, task_topic, [legacy, pinned])

        # A canary starts (0% of new workflows: only pins and the unpinned matter here), then
        # the new release is promoted. An unpinned workflow is claimed for the stable release
        # of the moment and stays there.
        await publish(
            kafka_bootstrap,
            rollouts_topic,
            [policy(name, 1, stable=UNNAMED, canary=NEW, percent=0, status="canary", action="start")],
        )
        await follows([unnamed, named], name, 1)
        before = envelope(TaskSubmitted(task="before-promote"))
        await publish(kafka_bootstrap, task_topic, [before])
        await _handled(pg, name, [legacy.workflow_id, pinned.workflow_id, before.workflow_id])
        await publish(
            kafka_bootstrap,
            rollouts_topic,
            [policy(name, 2, stable=NEW, canary=None, percent=0, status="promoted", action="promote")],
        )
        await follows([unnamed, named], name, 2)
        again = envelope(TaskSubmitted(task="after-promote"), workflow_id=before.workflow_id)
        fresh = envelope(TaskSubmitted(task="fresh"))
        await publish(kafka_bootstrap, task_topic, [again, fresh])
        await _handled(pg, name, [fresh.workflow_id], tasks=1)
        await _handled(pg, name, [before.workflow_id], tasks=2)

        expected = {
            legacy.event_id: {name: "done", f"{name}.{NEW}": "not_mine"},
            pinned.event_id: {name: "not_mine", f"{name}.{NEW}": "done"},
            before.event_id: {name: "done", f"{name}.{NEW}": "not_mine"},
            again.event_id: {name: "done", f"{name}.{NEW}": "not_mine"},
            fresh.event_id: {name: "not_mine", f"{name}.{NEW}": "done"},
        }

        # Each event handled by the release its workflow is pinned to, passed by the other.
        await _inboxes_become(pg, name, expected)

    rows = {
        r["workflow_id"]: (r["release"], r["tasks"])
        for r in await pg.fetch(
            f"SELECT workflow_id, release, state->'tasks' AS tasks FROM {name}.state", timeout=10
        )
    }
    assert rows[legacy.workflow_id][0] == UNNAMED
    assert rows[pinned.workflow_id][0] == NEW
    assert rows[before.workflow_id] == (UNNAMED, '["before-promote", "after-promote"]')  # stayed
    assert rows[fresh.workflow_id][0] == NEW  # claimed for the new stable


async def _handled(pg: asyncpg.Connection, name: str, workflow_ids: list[str], tasks: int = 1) -> None:
    async def done() -> bool:
        try:
            n = await pg.fetchval(
                f"""SELECT count(*) FROM {name}.state
                    WHERE workflow_id = ANY($1::text[]) AND jsonb_array_length(state->'tasks') >= $2""",
                workflow_ids,
                tasks,
            )
        except asyncpg.UndefinedTableError:
            return False
        return bool(n == len(workflow_ids))

    await wait_until(done, timeout_s=60, what=f"{workflow_ids} handled")


async def _inboxes_become(
    pg: asyncpg.Connection, name: str, expected: dict[uuid.UUID, dict[str, str]]
) -> None:
    """Until the inbox rows of these events are, per consumer group, the outcomes expected."""

    async def inboxes() -> dict[uuid.UUID, dict[str, str]]:
        found: dict[uuid.UUID, dict[str, str]] = {e: {} for e in expected}
        for r in await pg.fetch(
            f"SELECT consumer_group, event_id, outcome FROM {name}.inbox WHERE event_id = ANY($1)",
            list(expected),
        ):
            found[r["event_id"]][r["consumer_group"]] = r["outcome"]
        return found

    await wait_until(lambda: _equal(inboxes(), expected), timeout_s=30, what="both inboxes")


async def _equal(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_an_operator_moves_an_in_flight_workflow_to_another_release_and_no_step_is_taken_twice(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    """The canary is being removed while a workflow pinned to it is in flight: the operator
    moves it to main. The canary hands it over and answers; main, started only now, reads
    the topic from its beginning: the step the canary took is not taken again, the next
    one is main's, although every event of the workflow still carries its old pin."""
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    name = f"svc_{unique}"
    task_topic = registry.physical_topic("test.task_submitted")
    common = in_process(kafka_bootstrap, database_url)
    canary_group = f"{name}.{NEW}"
    async with AsyncExitStack() as stack:
        named = await stack.enter_async_context(
            running(make_spec(name), ServiceSettings(**common, release=NEW), registry=registry)
        )
        started = policy(name, 1, stable=UNNAMED, canary=NEW, percent=0, status="canary", action="start")
        await publish(kafka_bootstrap, registry.topic_for("rollout.changed").topic, [started])
        await follows([named], name, 1)
        first = envelope(TaskSubmitted(task="one")).model_copy(update={"pins": {name: NEW}})
        await publish(kafka_bootstrap, task_topic, [first])
        await _handled(pg, name, [first.workflow_id])

        request = repin_request(first.workflow_id, UNNAMED, NEW, name)
        await publish(kafka_bootstrap, registry.topic_for("workflow.repin_requested").topic, [request])
        [answer] = await _answers(
            kafka_bootstrap, registry.topic_for("workflow.repin_answered").topic, request
        )
        assert (answer["from_release"], answer["to_release"], answer["outcome"]) == (NEW, UNNAMED, "repinned")
        row = await pg.fetchrow(
            f"SELECT release, repinned_from FROM {name}.state WHERE workflow_id = $1", first.workflow_id
        )
        assert (row["release"], row["repinned_from"]) == (UNNAMED, [canary_group])

        unnamed = await stack.enter_async_context(
            running(make_spec(name), ServiceSettings(**common), registry=registry)
        )
        await follows([unnamed], name, 1)
        second = envelope(TaskSubmitted(task="two"), workflow_id=first.workflow_id).model_copy(
            update={"pins": {name: NEW}}
        )
        await publish(kafka_bootstrap, task_topic, [second])
        await _handled(pg, name, [first.workflow_id], tasks=2)

        expected = {
            first.event_id: {canary_group: "done", name: "not_mine"},  # taken before the move, once
            second.event_id: {canary_group: "not_mine", name: "done"},  # after it: main's
        }

        await _inboxes_become(pg, name, expected)
    tasks = await pg.fetchval(
        f"SELECT state->'tasks' FROM {name}.state WHERE workflow_id = $1", first.workflow_id
    )
    assert tasks == '["one", "two"]'


async def test_a_move_waits_until_nothing_of_the_workflow_is_in_flight_at_either_release(
    tmp_path: Path, database_url: str, pg: asyncpg.Connection, unique: str, kafka_bootstrap: str
) -> None:
    """The owner refuses to move a workflow while the other release has passed an event of it
    that the owner has not finished yet (nobody would ever take it), while a retry or a dead
    letter of it waits, or before it has a checkpoint here; once all settle, it moves, and a
    release that decided on the old pin cannot record an event as not its own any more."""
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    name = f"svc_{unique}"
    store = ServiceStore(name)
    pins = PinStore(name)
    await store.migrate(pg)
    canary_group = f"{name}.{NEW}"
    workflow_id = f"wf-{unique}"
    now = datetime.now(timezone.utc)
    await pg.execute(
        f"""INSERT INTO {name}.state (workflow_id, workflow_type, state, state_version, revision,
                                      created_at, updated_at, release)
            VALUES ($1, 'test', '{{"tasks": ["one"]}}', 1, 3, $2, $2, $3)""",
        workflow_id,
        now,
        NEW,
    )

    async def recorded(
        group: str, event_id: uuid.UUID, outcome: str, event_type: str = "test.task_submitted"
    ) -> None:
        """An event of the workflow in ``group``'s inbox, first attempt, with ``outcome``."""
        await pg.execute(
            f"""INSERT INTO {name}.inbox (consumer_group, event_id, attempt, outcome, event_type,
                                          workflow_id, processed_at)
                VALUES ($1, $2, 1, $3, $4, $5, $6)""",
            group,
            event_id,
            outcome,
            event_type,
            workflow_id,
            now,
        )

    in_flight = uuid.uuid4()
    # Main passed an event of the canary's workflow that the canary has not read yet.
    await recorded(name, in_flight, "not_mine")
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        repins = Repins(
            via=Answering(
                sql=store,
                pool=pool,
                outbox=OutboxWriter(store, registry, lambda: None, None, None),
                clock=SystemClock(),
                producer=ProducerRef(service=name, version=NEW),
                group=canary_group,
            ),
            pins=pins,
            base_group=name,
            identity=NEW,
            view=RolloutView(),
            state_version=1,
            handled_types=("test.task_submitted",),
        )

        async def ask() -> dict[str, Any]:
            request = repin_request(workflow_id, UNNAMED, NEW, name)
            await repins.answer(request, RepinRequested.model_validate(request.payload))
            value = await pg.fetchval(
                f"SELECT value FROM {name}.outbox WHERE workflow_id = $1 ORDER BY id DESC LIMIT 1",
                workflow_id,
            )
            answered: dict[str, Any] = json.loads(value)["payload"]
            assert answered["request_id"] == str(request.event_id)
            return answered

        async def pinned() -> tuple[str, int]:
            row = await pg.fetchrow(
                f"SELECT release, revision FROM {name}.state WHERE workflow_id = $1", workflow_id
            )
            return row["release"], row["revision"]

        refused = await ask()
        assert refused["outcome"] == "refused"
        assert f"release {UNNAMED} passed 1 event(s)" in refused["reason"]
        assert await pinned() == (NEW, 3)
        # (An event of a type the canary does not handle, passed by main, holds nothing up.)
        await recorded(name, uuid.uuid4(), "not_mine", "test.other")

        # The canary reads it and its step fails for now: a retry of it waits there.
        await recorded(canary_group, in_flight, "retrying")
        refused = await ask()
        assert refused["outcome"] == "refused" and "a retry, a dead letter" in refused["reason"]
        # Its retries spent, it is dead-lettered: it waits for an operator there, still.
        await pg.execute(
            f"UPDATE {name}.inbox SET outcome = 'dead_lettered' WHERE consumer_group = $1", canary_group
        )
        refused = await ask()
        assert refused["outcome"] == "refused" and "a retry, a dead letter" in refused["reason"]
        assert await pinned() == (NEW, 3)

        await pg.execute(f"UPDATE {name}.inbox SET outcome = 'done' WHERE consumer_group = $1", canary_group)
        moved = await ask()
        assert (moved["outcome"], moved["from_release"], moved["to_release"]) == ("repinned", NEW, UNNAMED)
        assert await pinned() == (UNNAMED, 4)  # the next revision: a step decided before cannot commit

        async def passed(group: str, pinned_to: str) -> bool:
            async with pool.acquire() as conn:
                return await pins.pass_event(
                    conn,
                    group=group,
                    event_id=uuid.uuid4(),
                    attempt=1,
                    event_type="test.task_submitted",
                    workflow_id=workflow_id,
                    pinned_to=pinned_to,
                    now=now,
                )

        assert not await passed(name, NEW)  # main decided on the old pin: decide again
        assert await passed(canary_group, UNNAMED)
        # A workflow this service holds no checkpoint of (pinned, not reached here yet) stays.
        unreached = repin_request(f"wf-new-{unique}", UNNAMED, NEW, name)
        await repins.answer(unreached, RepinRequested.model_validate(unreached.payload))
        answer = json.loads(
            await pg.fetchval(f"SELECT value FROM {name}.outbox WHERE workflow_id = $1", f"wf-new-{unique}")
        )["payload"]
        assert answer["outcome"] == "refused" and "no checkpoint" in answer["reason"]
        assert (
            await pg.fetchval(f"SELECT count(*) FROM {name}.state WHERE workflow_id = $1", f"wf-new-{unique}")
            == 0
        )

        # Asked again, the canary does not answer: main owns the workflow now.
        again = repin_request(workflow_id, UNNAMED, NEW, name)
        await repins.answer(again, RepinRequested.model_validate(again.payload))
        assert await pins.inbox_outcome(pg, canary_group, again.event_id) == "not_mine"
    finally:
        await pool.close()


async def _answers(bootstrap: str, topic: str, request: Envelope) -> list[dict[str, Any]]:
    def answered(records: list[Any]) -> bool:
        return bool(_matching(records, request))

    return _matching(await read_topic(bootstrap, [topic], until=answered, timeout_s=60), request)


def _matching(records: list[Any], request: Envelope) -> list[dict[str, Any]]:
    found = []
    for record in records:
        body = json.loads(record.value)
        if body["event_type"] == "workflow.repin_answered" and body["payload"]["request_id"] == str(
            request.event_id
        ):
            found.append(body["payload"])
    return found
