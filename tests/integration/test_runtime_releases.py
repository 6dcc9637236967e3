"""Two releases of one service in one runtime test: who owns a workflow (chorus.runtime.pinning).

Both releases read every event, each in its own consumer group; the checkpoint row they
share says which release a workflow is pinned to.
"""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from chorus.envelopes import start_envelope
from chorus.rollouts import MAIN_RELEASE, ROLLOUT_WORKFLOW_TYPE, rollout_workflow_id
from chorus.runtime.runner import ServiceRunner, ServiceSettings, running
from chorus_contracts.envelope import Envelope, ProducerRef
from chorus_contracts.rollouts import RolloutChanged
from tests.support.events import TaskSubmitted
from tests.support.kafka import envelope, publish
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
        now=datetime.now(UTC),
        idempotency_key=f"{service}:{revision}",
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
    common: dict[str, Any] = {
        "kafka_bootstrap": kafka_bootstrap,
        "database_url": database_url,
        "log_json": False,
    }
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

        async def inboxes() -> dict[uuid.UUID, dict[str, str]]:
            found: dict[uuid.UUID, dict[str, str]] = {e: {} for e in expected}
            for r in await pg.fetch(
                f"SELECT consumer_group, event_id, outcome FROM {name}.inbox WHERE event_id = ANY($1)",
                list(expected),
            ):
                found[r["event_id"]][r["consumer_group"]] = r["outcome"]
            return found

        # Each event handled by the release its workflow is pinned to, passed by the other.
        await wait_until(lambda: _equal(inboxes(), expected), timeout_s=30, what="both inboxes")

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


async def _equal(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
