"""Retention reaches the tables a service owns: when the audit projector retires workflows,
the timer service removes their timers and the dead-letter service their letters, each in
its own transaction, and says so in its confirmation (data.removed)."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from chorus.runtime.runner import running
from chorus_contracts.lifecycle import WorkflowDeadlineReached
from chorus_contracts.platform import FireTarget, TimerSchedule, WorkflowsRetired
from deadletter_service.config import Settings as LetterSettings
from deadletter_service.service import SPEC as LETTER_SPEC
from tests.support.events import dead_lettered
from tests.support.kafka import envelope, events_of, publish, read_topic
from tests.support.registry import isolated_registry
from tests.support.wait import wait_until
from timer_service.config import Settings as TimerSettings
from timer_service.service import SPEC as TIMER_SPEC

pytestmark = pytest.mark.integration


async def test_retired_workflows_take_their_timers_and_dead_letters_with_them(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    common: dict[str, Any] = {
        "kafka_bootstrap": kafka_bootstrap,
        "database_url": database_url,
        "log_json": False,
    }
    retired, kept = f"wf-old-{unique}", f"wf-new-{unique}"
    later = datetime.now(UTC) + timedelta(days=30)

    def timer(workflow_id: str) -> Any:
        fire = envelope(WorkflowDeadlineReached(deadline_at=later), workflow_id=workflow_id)
        schedule = TimerSchedule(
            timer_id=f"deadline-{workflow_id}",
            due_at=later,
            fire=FireTarget(
                topic=registry.physical_topic("workflow.deadline_reached"),
                key=workflow_id,
                value=fire.model_dump(mode="json"),
            ),
            purpose="deadline",
        )
        return envelope(schedule, workflow_id=workflow_id)

    def letter(workflow_id: str) -> Any:
        payload = dead_lettered(
            service=f"svc-{unique}",
            topic="procurement.events",
            value=b'{"document_text": "Jane Roe"}',
            category="persistent",
            at=datetime.now(UTC),
            original_workflow_id=workflow_id,
        )
        return envelope(payload, workflow_id=workflow_id)

    async with AsyncExitStack() as stack:
        await stack.enter_async_context(
            running(TIMER_SPEC, TimerSettings(**common, group_id=f"timers-{unique}"), registry=registry)
        )
        await stack.enter_async_context(
            running(LETTER_SPEC, LetterSettings(**common, group_id=f"letters-{unique}"), registry=registry)
        )
        await publish(
            kafka_bootstrap, registry.physical_topic("timer.schedule"), [timer(retired), timer(kept)]
        )
        await publish(
            kafka_bootstrap, registry.physical_topic("event.dead_lettered"), [letter(retired), letter(kept)]
        )

        async def counts() -> dict[str, int]:
            timers = await pg.fetchval(
                "SELECT count(*) FROM timer_service.timers WHERE workflow_id = ANY($1::text[])",
                [retired, kept],
            )
            letters = await pg.fetchval(
                """SELECT count(*) FROM deadletter_service.letters
                    WHERE original_workflow_id = ANY($1::text[])""",
                [retired, kept],
            )
            return {"timers": timers, "letters": letters}

        await wait_until(lambda: _equal(counts(), {"timers": 2, "letters": 2}), what="both stored")

        run_id = str(uuid.uuid4())
        request = WorkflowsRetired(run_id=run_id, batch=1, mode="purge", workflow_ids=[retired])
        data = registry.physical_topic("workflows.retired")
        await publish(kafka_bootstrap, data, [envelope(request, workflow_id=f"retention-{unique}")])
        await wait_until(
            lambda: _equal(counts(), {"timers": 1, "letters": 1}), what="the retired ones removed"
        )
        records = await read_topic(
            kafka_bootstrap,
            [registry.physical_topic("data.removed")],
            until=lambda rs: len(_confirmations(rs, run_id)) >= 2,
        )
    kept_rows = await pg.fetchval("SELECT count(*) FROM timer_service.timers WHERE workflow_id = $1", kept)
    assert kept_rows == 1
    confirmed = _confirmations(records, run_id)
    assert confirmed["timer_service"]["rows"]["timer_service.timers"] == 1
    assert confirmed["deadletter_service"]["rows"]["deadletter_service.letters"] == 1


async def _equal(found: Any, wanted: dict[str, int]) -> bool:
    return bool(await found == wanted)


def _confirmations(records: list[Any], run_id: str) -> dict[str, dict[str, Any]]:
    return {
        e["payload"]["service"]: e["payload"]
        for e in events_of(records, "data.removed")
        if e["payload"]["request_id"] == f"{run_id}/1"
    }
