"""Every revision of a checkpoint is kept, with the step that wrote it (chorus.kernel.store),
and a reset rolls it back through them (chorus.resets.store). PostgreSQL only: the memory
store runs handlers, it keeps no history."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

import asyncpg
import pytest

from chorus.contracts.envelope import Envelope
from chorus.contracts.registry import Registry, load_registry
from chorus.kernel.store import Checkpoint, InboxOutcome, Position
from chorus.kernel.store.postgres import PgStore, ServiceStore
from chorus.privacy.store import DataStore
from chorus.resets.store import Busy, Pending, ResetStore, Rewound
from chorus.testing import make_event
from tests.support.events import TaskSubmitted
from tests.support.kernel import KernelUnderTest
from tests.support.registry import isolated_schemas
from tests.support.testservice import make_spec

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return load_registry(isolated_schemas(tmp_path_factory.mktemp("registry"), "kernel"))


@pytest.fixture
def name() -> str:
    return f"svc_{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def kernel(database_url: str, registry: Registry, name: str) -> AsyncIterator[KernelUnderTest]:
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
    sql = ServiceStore(name)
    async with pool.acquire() as conn:
        await sql.migrate(conn)
    under_test = KernelUnderTest(make_spec(name, workflow_end=True), registry, PgStore(sql, pool))
    try:
        yield under_test
    finally:
        await under_test.close()
        async with pool.acquire() as conn:
            await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        await pool.close()


def task(workflow_id: str, text: str, **fields: Any) -> Envelope:
    return make_event(TaskSubmitted(task=text, **fields), workflow_id=workflow_id).envelope


async def history(kernel: KernelUnderTest, workflow_id: str) -> list[dict[str, Any]]:
    store = kernel.store
    assert isinstance(store, PgStore)
    async with store.pool.acquire() as conn:
        rows = await conn.fetch(
            f"""SELECT revision, event_id, event_type, topic, "offset", state::text AS state, ended, undone_by
                FROM {store.sql.schema}.state_history WHERE workflow_id = $1 ORDER BY revision""",
            workflow_id,
        )
        current = await conn.fetchval(
            f"SELECT state::text FROM {store.sql.schema}.state WHERE workflow_id = $1", workflow_id
        )
    assert not rows or rows[-1]["state"] == current, "the last revision kept is the checkpoint"
    return [dict(r) for r in rows]


async def test_each_step_keeps_the_checkpoint_it_wrote_and_the_event_and_offset_it_read(
    kernel: KernelUnderTest,
) -> None:
    first, second = task("wf-h1", "t1"), task("wf-h1", "t2")
    topic = kernel.registry.physical_topic("test.task_submitted")
    await kernel.deliver(first, second)
    rows = await history(kernel, "wf-h1")
    assert [(r["revision"], r["event_id"], r["event_type"]) for r in rows] == [
        (1, first.event_id, "test.task_submitted"),
        (2, second.event_id, "test.task_submitted"),
    ]
    assert [r["topic"] for r in rows] == [topic, topic]
    assert rows[0]["offset"] < rows[1]["offset"]
    assert '"handled": 1' in rows[0]["state"] and '"handled": 2' in rows[1]["state"]


async def test_a_mid_step_checkpoint_and_a_retry_are_revisions_of_their_step(kernel: KernelUnderTest) -> None:
    long = task("wf-h2", "long", mode="steps")
    await kernel.deliver(long)
    await kernel.settle()  # the step's retry, resumed after its last checkpoint
    rows = await history(kernel, "wf-h2")
    assert [r["revision"] for r in rows] == list(range(1, len(rows) + 1))
    assert len(rows) >= 3  # two checkpoints mid-step, then the step's commit (and its retry's)
    assert {r["event_id"] for r in rows} == {long.event_id}


async def test_a_checkpoint_written_outside_a_step_names_no_event(kernel: KernelUnderTest) -> None:
    await kernel.deliver(task("wf-h3", "t1"))
    store = kernel.store
    assert isinstance(store, PgStore)
    (loaded,) = await store.load_many(kernel.identity.group, [(uuid.uuid4(), "wf-h3")])
    assert loaded.state is not None
    now = datetime.now(timezone.utc)
    await store.checkpoint(
        Checkpoint("wf-h3", "test", {"moved": True}, 1, loaded.state.revision, None, None, now)
    )
    rows = await history(kernel, "wf-h3")
    assert [(r["revision"], r["event_id"]) for r in rows][-1] == (2, None)


async def test_retiring_a_workflow_removes_its_history_and_leaves_the_others(kernel: KernelUnderTest) -> None:
    await kernel.deliver(task("wf-h4", "t1"), task("wf-h4", "t2"), task("wf-h5", "t1"))
    store = kernel.store
    assert isinstance(store, PgStore)
    async with store.pool.acquire() as conn, conn.transaction():
        rows, touched = await DataStore(store.sql.service).retire(
            conn, ["wf-h4"], run_id=uuid.uuid4(), archive=False, now=datetime.now(timezone.utc)
        )
    assert rows[f"{store.sql.service}.state_history"] == 2 and touched == 1
    assert await history(kernel, "wf-h4") == []
    assert len(await history(kernel, "wf-h5")) == 1


async def rewind(
    kernel: KernelUnderTest, workflow_id: str, point: Envelope, *undone: Envelope
) -> Rewound | Busy:
    store = kernel.store
    assert isinstance(store, PgStore)
    async with store.pool.acquire() as conn, conn.transaction():
        return await ResetStore(store.sql.service).rewind(
            conn,
            group=kernel.identity.group,
            workflow_id=workflow_id,
            point=point.event_id,
            undone=[e.event_id for e in undone],
            reset_id=RESET_ID,
            rerun_point=point.event_id,
            cause=RESET,
            cause_type="workflow.reset_requested",
            now=datetime.now(timezone.utc),
        )


async def pending(kernel: KernelUnderTest, workflow_id: str, point: Envelope) -> Pending | None:
    store = kernel.store
    assert isinstance(store, PgStore)
    async with store.pool.acquire() as conn:
        return await ResetStore(store.sql.service).pending(
            conn,
            group=kernel.identity.group,
            workflow_id=workflow_id,
            reset_id=RESET_ID,
            point=point.event_id,
            rerun_point=point.event_id,
        )


RESET = uuid.UUID(int=7)
RESET_ID = "rst-" + "7" * 32


async def test_a_rewind_goes_back_to_the_checkpoint_before_the_point_and_the_point_runs_again(
    kernel: KernelUnderTest,
) -> None:
    t1, t2, t3 = task("wf-r1", "t1"), task("wf-r1", "t2"), task("wf-r1", "t3")
    await kernel.deliver(t1, t2, t3)
    first_run = {e["event_id"] for e in await kernel.events("test.task_done")}
    rewound = await rewind(kernel, "wf-r1", t2, t3)
    assert isinstance(rewound, Rewound)
    assert (rewound.steps, rewound.to_revision, rewound.fenced) == (2, 1, 1)
    assert rewound.before is not None and rewound.before.state is not None
    assert rewound.before.state["tasks"] == ["t1", "t2", "t3"]
    assert rewound.after is not None and rewound.after.state is not None
    assert rewound.after.state["tasks"] == ["t1"]
    topic = kernel.registry.physical_topic("test.task_submitted")
    assert isinstance(rewound.point, Position) and rewound.point.topic == topic
    rows = await history(kernel, "wf-r1")
    assert [(r["revision"], r["event_id"], r["undone_by"]) for r in rows] == [
        (1, t1.event_id, None),
        (2, t2.event_id, RESET_ID),  # what the reset rolled back stays, marked
        (3, t3.event_id, RESET_ID),
        (4, RESET, None),
    ]
    assert await pending(kernel, "wf-r1", t2) == Pending(rewound.point)
    # The point is handled again from the state it had then; t1 stays handled once, and t3
    # (undone) is skipped should it come again.
    await kernel.deliver(t2, t1, t3)
    rows = [r for r in await history(kernel, "wf-r1") if r["undone_by"] is None]
    assert [r["event_id"] for r in rows] == [t1.event_id, RESET, t2.event_id]
    assert '"tasks": ["t1", "t2"]' in rows[-1]["state"]
    assert await pending(kernel, "wf-r1", t2) is None  # handled again: nothing left to finish
    # What the re-run emitted are new events: no consumer takes them for the first run's.
    done = await kernel.events("test.task_done")
    rerun = [e for e in done if e["event_id"] not in first_run]
    assert [e["payload"]["task"] for e in rerun] == ["t2"]


async def test_a_rewind_past_the_first_step_leaves_no_state_and_a_repeat_changes_nothing(
    kernel: KernelUnderTest,
) -> None:
    t1, t2 = task("wf-r2", "t1"), task("wf-r2", "t2")
    await kernel.deliver(t1, t2)
    rewound = await rewind(kernel, "wf-r2", t1, t2)
    assert isinstance(rewound, Rewound) and (rewound.steps, rewound.to_revision) == (2, None)
    assert rewound.after is None
    again = await rewind(kernel, "wf-r2", t1, t2)  # its steps are gone from the history
    assert isinstance(again, Rewound) and (again.steps, again.point) == (0, None)
    assert again.before is not None and again.before.state is None  # the row stays, empty
    await kernel.deliver(t1)
    rows = await history(kernel, "wf-r2")
    assert '"tasks": ["t1"]' in rows[-1]["state"] and '"handled": 1' in rows[-1]["state"]


async def test_a_rewind_of_a_workflow_waiting_on_a_retry_is_refused_and_changes_nothing(
    kernel: KernelUnderTest,
) -> None:
    t1, t2 = task("wf-r3", "t1"), task("wf-r3", "t2", transient_failures=1)
    await kernel.deliver(t1, t2)
    before = await history(kernel, "wf-r3")
    assert isinstance(await rewind(kernel, "wf-r3", t1, t2), Busy)
    assert await history(kernel, "wf-r3") == before
    (loaded,) = await kernel.store.load_many(kernel.identity.group, [(t1.event_id, "wf-r3")])
    assert loaded.inbox is not None and loaded.inbox.outcome is InboxOutcome.DONE
