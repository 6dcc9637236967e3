"""Retention reaches the tables a service owns: when the audit projector retires workflows,
the timer service removes their timers and the dead-letter service their letters, each in
its own transaction, and says so in its confirmation (data.removed)."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from chorus.contracts.lifecycle import WorkflowDeadlineReached
from chorus.contracts.platform import FireTarget, TimerSchedule, WorkflowsRetired
from chorus.platform.deadletter_service.config import Settings as LetterSettings
from chorus.platform.deadletter_service.service import SPEC as LETTER_SPEC
from chorus.platform.timer_service.config import Settings as TimerSettings
from chorus.platform.timer_service.service import SPEC as TIMER_SPEC
from chorus.runtime.runner import running
from tests.support.events import dead_lettered
from tests.support.kafka import envelope, events_of, publish, read_topic, refused_by, stated_by
from tests.support.onkafka import in_process
from tests.support.registry import isolated_registry
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


async def test_retired_workflows_take_their_timers_and_dead_letters_with_them(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    common = in_process(kafka_bootstrap, database_url)
    retired, kept = f"wf-old-{unique}", f"wf-new-{unique}"
    later = datetime.now(timezone.utc) + timedelta(days=30)

    def timer(workflow_id: str) -> Any:
        fire = envelope(WorkflowDeadlineReached(deadline_at=later), workflow_id=workflow_id)
        schedule = TimerSchedule(
            timer_id=f"test:{workflow_id}:deadline",  # its (unregistered) producer's namespace
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
            at=datetime.now(timezone.utc),
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
        retirement = stated_by(envelope(request, workflow_id=f"retention-{unique}"), "audit_projector")
        # Forged first: any writer of chorus.data claiming to be the projector, unsigned.
        await publish(kafka_bootstrap, data, [retirement], sign=False)
        await refused_by(kafka_bootstrap, registry, retirement, {"timer_service", "deadletter_service"})
        assert await counts() == {"timers": 2, "letters": 2}
        await publish(kafka_bootstrap, data, [retirement])
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


async def _equal(found: Any, wanted: dict[str, Any]) -> bool:
    return bool(await found == wanted)


def _confirmations(records: list[Any], run_id: str) -> dict[str, dict[str, Any]]:
    return {
        e["payload"]["service"]: e["payload"]
        for e in events_of(records, "data.removed")
        if e["payload"]["request_id"] == f"{run_id}/1"
    }


async def test_what_no_retirement_reaches_goes_after_its_own_keep_time(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, pg: asyncpg.Connection, unique: str
) -> None:
    """Fired and cancelled timers (7 days), resolved dead letters (30 days after they were
    resolved), poison records no workflow owns (30 days, open or not) and archived rows
    (365 days): each owner removes them on its own, on its own clock; the rest stays."""
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    common = in_process(kafka_bootstrap, database_url)
    now = datetime.now(timezone.utc)
    day = timedelta(days=1)
    service = f"svc-purge-{unique}"
    names = ("resolved-long-ago", "open", "poison", "resolved-yesterday")

    def letter(name: str) -> Any:
        payload = dead_lettered(
            service=service,
            topic="procurement.events",
            value=name.encode(),
            category="persistent",
            at=now,
            original_workflow_id=None if name == "poison" else f"wf-{name}-{unique}",
        )
        return envelope(payload, workflow_id=f"wf-{name}-{unique}")

    async with AsyncExitStack() as stack:
        timers = await stack.enter_async_context(
            running(TIMER_SPEC, TimerSettings(**common, group_id=f"timers-{unique}"), registry=registry)
        )
        letters = await stack.enter_async_context(
            running(LETTER_SPEC, LetterSettings(**common, group_id=f"letters-{unique}"), registry=registry)
        )
        await publish(
            kafka_bootstrap, registry.physical_topic("event.dead_lettered"), [letter(n) for n in names]
        )
        await wait_until(
            lambda: _equal(_letters(pg, service), {n: "open" for n in names}), what="the letters stored"
        )
        for name, status, resolved in (
            ("resolved-long-ago", "discarded", 31),
            ("resolved-yesterday", "redriven", 1),
        ):
            await pg.execute(
                """UPDATE deadletter_service.letters SET status = $1, resolved_at = $2, resolved_by = 'op'
                    WHERE service = $3 AND original_value = $4""",
                status,
                now - resolved * day,
                service,
                name.encode(),
            )
        await pg.execute(
            """UPDATE deadletter_service.letters SET dead_lettered_at = $1
                WHERE service = $2 AND original_value = ANY($3::bytea[])""",
            now - 40 * day,
            service,
            [b"poison", b"open"],
        )
        for timer_id, status, age in (
            ("fired", "fired", 8),
            ("pending", "pending", 8),
            ("cancelled", "cancelled", 1),
        ):
            await pg.execute(
                """INSERT INTO timer_service.timers (timer_id, status, workflow_id, created_at, updated_at)
                    VALUES ($1, $2, $3, $4, $4)""",
                f"{timer_id}-{unique}",
                status,
                f"wf-t-{unique}",
                now - age * day,
            )
        for source, age in (("old", 366), ("recent", 1)):
            await pg.execute(
                """INSERT INTO timer_service.archive (run_id, source, workflow_id, row, archived_at)
                    VALUES ($1, $2, $3, '{}', $4)""",
                uuid.uuid4(),
                f"{source}-{unique}",
                f"wf-a-{unique}",
                now - age * day,
            )

        await timers.purge(pg, now)
        await letters.purge(pg, now)

    assert await _letters(pg, service) == {"open": "open", "resolved-yesterday": "redriven"}
    left = await pg.fetch(
        "SELECT timer_id FROM timer_service.timers WHERE workflow_id = $1", f"wf-t-{unique}"
    )
    assert sorted(r["timer_id"] for r in left) == [f"cancelled-{unique}", f"pending-{unique}"]
    archived = await pg.fetch(
        "SELECT source FROM timer_service.archive WHERE workflow_id = $1", f"wf-a-{unique}"
    )
    assert [r["source"] for r in archived] == [f"recent-{unique}"]


async def _letters(pg: asyncpg.Connection, service: str) -> dict[str, str]:
    rows = await pg.fetch(
        "SELECT original_value, status FROM deadletter_service.letters WHERE service = $1", service
    )
    return {bytes(r["original_value"]).decode(): r["status"] for r in rows}
