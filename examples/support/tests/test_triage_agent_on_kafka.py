"""triage_agent as it runs in production: on a real Kafka broker and PostgreSQL, with the
CRM and the helpdesk of support_sandbox on a local port and the stand-in model in process."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from chorus.llm import AgentLoop, OfflineModel
from chorus.runtime.runner import running
from chorus.teststack import isolated_registry, publish, read_events

from support_contracts.events import TicketAnswered, TicketReceived
from support_sandbox import TOOL_SKILLS, setup
from triage_agent.adapters.outside import Crm, Helpdesk, crm_tools
from triage_agent.bootstrap import Deps
from triage_agent.config import Settings
from triage_agent.service import SPEC

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("key_store")]


@asynccontextmanager
async def outside_world() -> AsyncIterator[str]:
    """support_sandbox's CRM and helpdesk, served on a free port: their URL."""
    app = web.Application()
    setup(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def test_a_ticket_is_answered_once_even_when_delivered_twice(
    tmp_path: Path, bootstrap: str, unique: str
) -> None:
    registry = await isolated_registry(tmp_path, unique, bootstrap)  # this test's own topics
    settings = Settings(schemas_dir=str(registry.root), group_id=f"{SPEC.name}-{unique}", http_port=0)
    async with outside_world() as url, httpx.AsyncClient() as client:

        @asynccontextmanager
        async def with_outside_world(_: Settings) -> AsyncIterator[Deps]:
            crm = Crm(client, f"{url}/crm")
            yield Deps(
                agent=AgentLoop(OfflineModel({}, TOOL_SKILLS), crm_tools(crm), name="triage"),
                helpdesk=Helpdesk(client, f"{url}/helpdesk"),
                refund_threshold_cents=5000,
                approval_chain=[],
                reply_within_s=3600,
            )

        spec = dataclasses.replace(SPEC, bootstrap=with_outside_world)
        async with running(spec, settings, registry=registry):
            ticket = TicketReceived(customer_id="cust-1002", subject="Charged twice", body="Please refund.")
            sent = await publish(registry, bootstrap, ticket.model_copy(update={"refund_cents": 900}))
            await publish(registry, bootstrap, sent)  # the same event again: a redelivery
            answers = await read_events(
                registry, bootstrap, "ticket.answered", workflow_id=sent.workflow_id, settle_s=3.0
            )
        replies = (await client.get(f"{url}/helpdesk/replies")).json()
        notes = (await client.get(f"{url}/crm/notes")).json()
    answered: TicketAnswered = answers[0].payload
    assert len(answers) == 1 and (answered.category, answered.refund_cents) == ("billing", 900)
    assert [r["customer_id"] for r in replies] == ["cust-1002"]  # the customer heard from us once
    assert [(n["customer_id"], n["requests"]) for n in notes] == [("cust-1002", 1)]  # noted once
