"""A Pydantic AI agent with two tools as a Chorus handler (chorus.pydantic_ai), durable across
SIGKILL: the service process is killed after a model turn, mid tool call and after a tool
call, and each restart goes on from the step's checkpoint. The sandbox counts what reached the
outside: no model turn asked twice, the lookup made once, the reservation made once though
its call (killed mid-way) was sent twice with the same key."""

from __future__ import annotations

import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.events import TaskSubmitted
from tests.support.kafka import envelope, events_of, publish, read_topic
from tests.support.processes import ServiceProcess, infra_env
from tests.support.registry import isolated_registry
from tests.support.sandboxes import sandbox_running

pytestmark = pytest.mark.integration


@pytest.fixture
async def sandbox() -> AsyncIterator[str]:
    async with sandbox_running("tests.support.stock_sandbox") as url:
        yield url


async def _seen(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"{url}/stats")).json(), (await client.get(f"{url}/stock/seen")).json()


async def test_a_pydantic_ai_agent_killed_at_each_point_of_its_run_asks_and_reserves_once(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str, sandbox: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    topic = registry.physical_topic("test.task_submitted")
    env = {
        **infra_env(registry.root, kafka_bootstrap, database_url),
        "TEST_SERVICE_NAME": f"stock_{unique}",
        "CHORUS_LLM_BASE_URL": f"{sandbox}/v1",
        "CHORUS_LLM_PRICES": '{"chorus-offline-deterministic": [1.0, 2.0]}',
        "CHORUS_STOCK_URL": f"{sandbox}/stock",
    }
    await publish(kafka_bootstrap, topic, [envelope(TaskSubmitted(task="bolt"))])
    service = ServiceProcess("tests.support.stockservice", env, tmp_path)
    with service:
        # After its first model turn is kept; mid way through the reservation (the lookup's
        # call passes the point first); after the reservation's second try is kept.
        for faults in ("after_model_turn:1", "mid_tool_call:2", "after_tool_call:1"):
            service.start(CHORUS_FAULTS=faults)
            assert await service.wait_exit(timeout_s=90) == -signal.SIGKILL, service.tail()
        service.start()
        records = await read_topic(
            kafka_bootstrap, [topic], until=lambda rs: len(events_of(rs, "test.task_done")) >= 1
        )
        await service.terminate()

    [done] = {d["event_id"]: d for d in events_of(records, "test.task_done")}.values()
    assert done["payload"]["task"] == "reserved 2 bolt"
    assert done["payload"]["handled_count"] == 3  # the run's model turns, across four processes
    stats, stock = await _seen(sandbox)
    assert stats["llm_calls"] == {"stock_task": 3}, stats["llm_calls"]
    assert stats["llm_repeated"] == {}  # no conversation was sent twice
    assert stock["lookups"] == {"bolt": 1}
    # The reservation killed mid-call was sent again with the same key, and made once.
    assert list(stock["reserve_requests"].values()) == [2], stock
    [(key, made)] = stock["reservations"].items()
    # The workflow's key, the service's, the agent's and the call's place in the run.
    assert re.search(f":stock_{unique}:stock:3:[0-9a-f]{{16}}$", key), key
    assert (made["item"], made["quantity"]) == ("bolt", 2)
