"""The sandbox's model in a tool-calling loop, over HTTP as an agent calls it: the support
project's triage (its plugin: the stand-in's turns, the CRM the tools call) run by
chorus.llm.AgentLoop through the OpenAI-compatible client. What the reliability suite counts
(a conversation asked twice, notes by key) is what these stats say."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from chorus.base.clock import SystemClock
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import AgentOutputStreamed
from chorus.outside.llm import AgentLoop, Transcript
from chorus.outside.llm.client import OpenAICompatibleLLM
from chorus.reference.sandbox.app import STREAM_PIECE
from tests.support.sandboxes import sandbox_running

SUPPORT = Path(__file__).resolve().parents[3] / "examples" / "support" / "services"


class Kept(BaseModel):
    transcript: Transcript


def kept(transcript: Transcript) -> Kept:
    return Kept(transcript=transcript)


class Checkpoints:
    """A handler context's part the loop uses: the checkpoints it kept, in memory."""

    def __init__(self) -> None:
        self.kept: list[Transcript] = []

    async def checkpoint(self, state: BaseModel, *, emit: Sequence[EventModel] = ()) -> None:
        assert isinstance(state, Kept)
        self.kept.append(state.transcript)

    def idempotency_key(self, *parts: str) -> str:
        return ":".join(("wf-1", "triage_agent", *parts))


@pytest.fixture
async def sandbox(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.syspath_prepend(str(SUPPORT))
    async with sandbox_running("support_sandbox") as url:
        yield url


async def stats(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    seen: dict[str, Any] = (await client.get(f"{url}/stats")).json()
    return seen


async def test_the_triage_loop_over_http_looks_up_notes_once_and_answers(sandbox: str) -> None:
    # The project's own modules, found as its services find them (not on this checkout's paths).
    events = importlib.import_module("support_contracts.events")
    outside = importlib.import_module("triage_agent.adapters.outside")
    domain = importlib.import_module("triage_agent.domain")
    ticket = events.TicketReceived(
        customer_id="cust-1002", subject="Charged twice", body="Refund it.", refund_cents=4000
    )
    async with httpx.AsyncClient() as client:
        model = OpenAICompatibleLLM(client, base_url=f"{sandbox}/v1", model="gpt-4o-mini")
        loop = AgentLoop(model, outside.crm_tools(outside.Crm(client, f"{sandbox}/crm")), name="triage")
        ctx = Checkpoints()
        transcript = await loop.run(ctx, domain.triage_prompt(ticket), None, kept)
        triage = domain.Triage.model_validate_json(transcript.answer or "")
        assert domain.semantic_errors(triage, ticket, *domain.looked_up(transcript, ticket.customer_id)) == []
        assert [[c.name for c in t.answer.tool_calls] for t in transcript.turns] == [
            ["lookup_customer", "order_history"],
            ["add_crm_note"],
            [],
        ]
        assert triage.reply.startswith("Dear Grace Hopper") and triage.refund_cents == 4000
        assert all(t.answer.usage.input_tokens > 0 for t in transcript.turns)

        # Run again on what the checkpoint kept (a resume after a crash): nothing is asked again.
        again = await loop.run(ctx, domain.triage_prompt(ticket), ctx.kept[-1], kept)
        assert again == transcript
        seen = await stats(client, sandbox)
        assert seen["llm_calls"] == {"triage_ticket": 3} and seen["llm_repeated"] == {}
        notes = (await client.get(f"{sandbox}/crm/notes")).json()
        assert [(n["customer_id"], n["requests"]) for n in notes] == [("cust-1002", 1)]

        # From the checkpoint before the last turn: that turn is the one asked twice.
        await loop.run(ctx, domain.triage_prompt(ticket), ctx.kept[-2], kept)
        assert list((await stats(client, sandbox))["llm_repeated"].values()) == [2]


class Streaming(Checkpoints):
    """A handler's context as a loop that streams uses it: its service, its clock, and what
    each checkpoint published."""

    service = "triage_agent"

    def __init__(self) -> None:
        super().__init__()
        self.clock = SystemClock()
        self.published: list[AgentOutputStreamed] = []

    async def checkpoint(self, state: BaseModel, *, emit: Sequence[EventModel] = ()) -> None:
        await super().checkpoint(state)
        self.published += [e for e in emit if isinstance(e, AgentOutputStreamed)]


async def test_a_streamed_answer_is_published_as_it_grows_and_the_turn_is_the_same(sandbox: str) -> None:
    events = importlib.import_module("support_contracts.events")
    outside = importlib.import_module("triage_agent.adapters.outside")
    domain = importlib.import_module("triage_agent.domain")
    ticket = events.TicketReceived(
        customer_id="cust-1002", subject="Charged twice, SLOW", body="Refund it.", refund_cents=4000
    )
    async with httpx.AsyncClient() as client:
        model = OpenAICompatibleLLM(client, base_url=f"{sandbox}/v1", model="gpt-4o-mini")
        tools = outside.crm_tools(outside.Crm(client, f"{sandbox}/crm"))
        # Published at most every 1.5 s: the answer comes a piece a second.
        loop = AgentLoop(model, tools, name="triage", stream_every_s=1.5)
        ctx = Streaming()
        transcript = await loop.run(ctx, domain.triage_prompt(ticket), None, kept)
    answer = transcript.answer or ""
    assert domain.Triage.model_validate_json(answer).refund_cents == 4000  # put together whole
    assert transcript.turns[-1].answer.usage.output_tokens > 0  # the usage chunk, last
    published = ctx.published
    assert 2 <= len(published) < len(answer) / STREAM_PIECE  # fewer than the pieces: at most every 1.5 s
    assert all(p.turn == 3 and p.step == "triage" and p.service == "triage_agent" for p in published)
    assert [p.chars for p in published] == sorted(p.chars for p in published)
    assert all(answer.startswith(p.text) and p.chars == len(p.text) for p in published)
    assert published[-1].chars < len(answer)  # said while it was being written


async def test_a_tool_turn_for_a_task_without_tool_skills_is_a_400_naming_it(sandbox: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{sandbox}/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "system", "content": "task: extract_invoice"}],
                "tools": [{"type": "function", "function": {"name": "x", "parameters": {}}}],
            },
        )
    assert response.status_code == 400 and "no tool skill for extract_invoice" in response.text
