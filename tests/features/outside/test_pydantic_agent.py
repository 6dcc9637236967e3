"""A Pydantic AI agent run by chorus.pydantic_ai: each model request and tool call kept in the
step's checkpoint as it completes, so a run resumed from any checkpoint asks the model nothing
it has and makes no call again whose result it has; a changed prompt replays nothing; limits
stop the run with its spend; the run in the audit trail's form; the model behind Chorus's
guard with its failures in Chorus's terms."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from chorus.base.errors import PersistentError, TransientError
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import AgentTurnRecorded, SpendRecorded
from chorus.llm import LoopLimitError, LoopLimitFailed, LoopLimits, Prices
from chorus.pydantic_ai import (
    AgentJournal,
    ChorusDurability,
    GuardedModel,
    idempotency_key,
    run_agent,
)
from tests.support.sandboxes import sandbox_running


class Kept(BaseModel):
    journal: AgentJournal


def keep(journal: AgentJournal) -> Kept:
    return Kept(journal=journal)


class Checkpoints:
    """The part of a handler's context the run uses: what it kept, in memory."""

    def __init__(self) -> None:
        self.kept: list[AgentJournal] = []

    async def checkpoint(self, state: BaseModel, *, emit: Sequence[EventModel] = ()) -> None:
        assert isinstance(state, Kept)
        self.kept.append(state.journal)

    def idempotency_key(self, *parts: str) -> str:
        return ":".join(("wf-1", "stock_agent", *parts))


class World:
    """The model's turns (look the item up, reserve it, answer) and what the tools changed."""

    def __init__(self, item: str = "bolt", quantity: int = 2) -> None:
        """``item`` and ``quantity``: what the model makes of the order (the prompt)."""
        self.item, self.quantity = item, quantity
        self.asked = 0
        self.calls: Counter[str] = Counter()
        self.reserved: dict[str, int] = {}
        self.keys: list[str] = []

    def model(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.asked += 1
        turn = sum(1 for m in messages if m.kind == "response")
        if turn == 0:
            return ModelResponse(parts=[ToolCallPart("look_up", {"item": self.item}, tool_call_id="c1")])
        if turn == 1:
            reserve = {"item": self.item, "quantity": self.quantity}
            return ModelResponse(parts=[ToolCallPart("reserve", reserve, tool_call_id="c2")])
        return ModelResponse(parts=[TextPart(f"reserved {self.quantity} {self.item}")])

    def agent(self) -> Agent[None, str]:
        agent = Agent(
            FunctionModel(self.model, model_name="stand-in"),
            name="stock",
            instructions="Reserve what the order asks.",
            capabilities=[ChorusDurability()],
        )

        @agent.tool_plain
        async def look_up(item: str) -> dict[str, Any]:
            self.calls["look_up"] += 1
            return {"item": item, "on_shelf": 5}

        @agent.tool_plain
        async def reserve(item: str, quantity: int) -> dict[str, Any]:
            self.calls["reserve"] += 1
            key = idempotency_key()
            self.keys.append(key)
            self.reserved.setdefault(key, quantity)
            return {"reserved": quantity}

        return agent


PROMPT = "Reserve 2 of bolt."


async def test_a_run_resumed_from_any_checkpoint_asks_and_calls_only_what_it_has_not_kept() -> None:
    world = World()
    ctx = Checkpoints()
    whole = await run_agent(world.agent(), ctx, None, keep, user_prompt=PROMPT)
    assert whole.output == "reserved 2 bolt"
    assert [e.kind for e in whole.journal.entries] == [
        "model_request",
        "tool_call",
        "model_request",
        "tool_call",
        "model_request",
    ]
    assert len(ctx.kept) == 5  # one checkpoint as each completed
    for kept in ctx.kept:
        # A process killed just after this checkpoint: the next one resumes from it.
        resumed = World()
        again = await run_agent(resumed.agent(), Checkpoints(), kept, keep, user_prompt=PROMPT)
        assert again.output == "reserved 2 bolt"
        assert again.journal == whole.journal.model_copy(update={"entries": again.journal.entries})
        done = Counter(e.kind for e in kept.entries)
        assert resumed.asked == 3 - done["model_request"]
        assert sum(resumed.calls.values()) == 2 - done["tool_call"]
        # The reservation, made by whichever run got to it, has the same key every time.
        assert resumed.keys in ([], world.keys)
    # Its place in the run (the 4th entry) and a digest of what it asked.
    [key] = world.keys
    assert re.fullmatch(r"wf-1:stock_agent:stock:3:[0-9a-f]{16}", key), key


async def test_a_call_cut_off_before_it_was_kept_is_made_again_with_the_same_key() -> None:
    world = World()
    ctx = Checkpoints()
    await run_agent(world.agent(), ctx, None, keep, user_prompt=PROMPT)
    before_reserving = ctx.kept[2]  # the reservation was made, then the process died
    await run_agent(world.agent(), Checkpoints(), before_reserving, keep, user_prompt=PROMPT)
    assert world.calls["reserve"] == 2
    assert len(world.keys) == 2 and len(set(world.keys)) == 1 and len(world.reserved) == 1


async def test_a_changed_prompt_replays_nothing_from_where_it_differs() -> None:
    world = World()
    ctx = Checkpoints()
    await run_agent(world.agent(), ctx, None, keep, user_prompt=PROMPT)
    other = World("nut", 3)
    await run_agent(other.agent(), Checkpoints(), ctx.kept[-1], keep, user_prompt="Reserve 3 of nut.")
    assert other.asked == 3 and sum(other.calls.values()) == 2
    # Another call at the same place in the run: a key of its own, not the one made before.
    assert other.keys != world.keys and len(other.keys) == 1


async def test_limits_stop_the_run_before_the_turn_they_refuse_with_what_it_spent() -> None:
    world = World()
    prices = Prices({"stand-in": (1_000_000.0, 1_000_000.0)})  # a dollar a token: easy sums
    with pytest.raises(LoopLimitError) as stopped:
        await run_agent(
            world.agent(),
            Checkpoints(),
            None,
            keep,
            limits=LoopLimits(max_turns=2),
            prices=prices,
            user_prompt=PROMPT,
        )
    assert world.asked == 2 and world.calls == {"look_up": 1, "reserve": 1}
    spent = stopped.value.usage
    assert spent.tokens > 0 and spent.cost_micro_usd == spent.tokens * 1_000_000
    assert "2 model turns without an answer" in str(stopped.value) and f"spent {spent.tokens} tokens" in str(
        stopped.value
    )
    # A workflow type's own limits, for the type of the event the handler is for.
    vip = Checkpoints()
    vip.envelope = SimpleNamespace(workflow_type="vip_order")  # type: ignore[attr-defined]
    by_type = {"vip_order": LoopLimits(max_turns=1)}
    with pytest.raises(LoopLimitError, match="1 model turns"):
        await run_agent(World().agent(), vip, None, keep, limits_by_type=by_type, user_prompt=PROMPT)
    other = await run_agent(
        World().agent(), Checkpoints(), None, keep, limits_by_type=by_type, user_prompt=PROMPT
    )
    assert other.output == "reserved 2 bolt"
    failing = LoopLimits(max_tokens=1, on_limit="fail")
    with pytest.raises(LoopLimitFailed, match="the budget of 1 tokens is spent"):
        await run_agent(World().agent(), Checkpoints(), None, keep, limits=failing, user_prompt=PROMPT)


async def test_the_run_in_the_audit_trail_has_a_turn_per_model_request_and_its_spend() -> None:
    run = await run_agent(
        World().agent(),
        Checkpoints(),
        None,
        keep,
        prices=Prices({"stand-in": (2.0, 4.0)}),
        user_prompt=PROMPT,
    )
    *said, spend = run.recorded("stock_agent", "order.received")
    turns = [t for t in said if isinstance(t, AgentTurnRecorded)]
    assert len(turns) == len(said) == 3 and isinstance(spend, SpendRecorded)
    assert [t.tools_called for t in turns] == [["look_up"], ["reserve"], []]
    assert [t.model for t in turns] == ["stand-in"] * 3
    assert turns[1].said.tool_calls[0].result == '{"reserved": 2}'
    assert turns[2].said.answer == "reserved 2 bolt"
    usage = run.journal.usage
    assert (spend.model_turns, spend.tool_calls, spend.input_tokens) == (3, 2, usage.input_tokens)
    assert spend.cost_micro_usd == usage.input_tokens * 2 + usage.output_tokens * 4 > 0


async def test_an_agent_without_the_capability_is_refused_and_a_key_is_only_a_tools() -> None:
    plain = Agent(FunctionModel(World().model), name="plain")
    with pytest.raises(ValueError, match="no ChorusDurability"):
        await run_agent(plain, Checkpoints(), None, keep, user_prompt=PROMPT)
    with pytest.raises(RuntimeError, match="for a tool"):
        idempotency_key()


class Recorded:
    """A guard that records how each call through it ended (a breaker counts the same)."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        try:
            yield
        except BaseException as exc:
            self.ended.append(type(exc).__name__)
            raise
        self.ended.append("answered")


@pytest.fixture
async def sandbox() -> AsyncIterator[str]:
    async with sandbox_running("tests.support.stock_sandbox") as url:
        yield url


def openai_model(base_url: str, model: str, guard: Recorded) -> GuardedModel:
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    return GuardedModel(OpenAIChatModel(model, provider=OpenAIProvider(openai_client=client)), guard)


async def test_the_model_answers_through_openais_client_behind_the_guard_its_failures_in_chorus_terms(
    sandbox: str,
) -> None:
    guard = Recorded()
    agent = Agent(
        openai_model(f"{sandbox}/v1", "gpt-4o-mini", guard),
        name="stock",
        instructions="task: stock_task\nReserve what the order asks.",
        capabilities=[ChorusDurability()],
    )

    @agent.tool_plain
    async def look_up(item: str) -> dict[str, Any]:
        return {"item": item, "on_shelf": 5}

    @agent.tool_plain
    async def reserve(item: str, quantity: int) -> dict[str, Any]:
        return {"reserved": quantity}

    run = await run_agent(agent, Checkpoints(), None, keep, user_prompt=PROMPT)
    assert run.output == "reserved 2 bolt" and guard.ended == ["answered"] * 3
    assert run.journal.usage.input_tokens > 0  # what the server said it read

    async with httpx.AsyncClient() as client:
        await client.put(f"{sandbox}/llm/outages/gpt-4o-mini")
    with pytest.raises(TransientError, match="503"):
        await run_agent(agent, Checkpoints(), None, keep, user_prompt=PROMPT)
    assert guard.ended[-1] == "TransientError"  # what the breaker counts as the model's failure

    refusing = Agent(
        openai_model(f"{sandbox}/v1", "gpt-4o-mini", guard), name="x", capabilities=[ChorusDurability()]
    )
    with pytest.raises(PersistentError, match="refused \\(400\\)"):
        await run_agent(refusing, Checkpoints(), None, keep, user_prompt="no task line")
