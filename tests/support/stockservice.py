"""A service whose handler is a Pydantic AI agent with two tools (look an item up, reserve
it), run by chorus.pydantic_ai: tests/e2e/test_pydantic_agent.py kills it at each point of
the agent's run. Runs as its own OS process (``python -m tests.support.stockservice``), its
model the sandbox's (tests/support/stock_sandbox.py) through OpenAI's client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext

from chorus.codec import Event
from chorus.llm import LLMSettings, Prices
from chorus.pydantic_ai import AgentJournal, ChorusDurability, guarded_model, idempotency_key, run_agent
from chorus.runtime.runner import ServiceSettings, main
from chorus.service import Context, On, Outcome, ServiceSpec
from tests.support.events import TaskDone, TaskSubmitted


class Settings(ServiceSettings, LLMSettings):
    stock_url: str = ""
    """The stock room the tools call (the sandbox's /stock)."""


class Progress(BaseModel):
    journal: AgentJournal = AgentJournal()


@dataclass(frozen=True)
class Stock:
    client: httpx.AsyncClient
    url: str


def stock_agent(model: Any) -> Agent[Stock, str]:
    agent = Agent(
        model,
        name="stock",
        deps_type=Stock,
        instructions="task: stock_task\nLook the item up, then reserve what the order asks.",
        capabilities=[ChorusDurability()],
    )

    @agent.tool
    async def look_up(ctx: RunContext[Stock], item: str) -> dict[str, Any]:
        """How many of ``item`` are on the shelf."""
        answer = await ctx.deps.client.get(f"{ctx.deps.url}/shelf/{item}")
        answer.raise_for_status()
        found: dict[str, Any] = answer.json()
        return found

    @agent.tool
    async def reserve(ctx: RunContext[Stock], item: str, quantity: int) -> dict[str, Any]:
        """Reserve ``quantity`` of ``item`` (once, however often it is retried)."""
        answer = await ctx.deps.client.post(
            f"{ctx.deps.url}/reservations",
            json={"item": item, "quantity": quantity},
            headers={"Idempotency-Key": idempotency_key()},
        )
        answer.raise_for_status()
        made: dict[str, Any] = answer.json()
        return made

    return agent


@dataclass(frozen=True)
class Deps:
    agent: Agent[Stock, str]
    stock: Stock
    settings: Settings


@asynccontextmanager
async def bootstrap(settings: Settings) -> AsyncIterator[Deps]:
    async with httpx.AsyncClient(timeout=10.0) as client, guarded_model(settings) as model:
        yield Deps(stock_agent(model), Stock(client, settings.stock_url), settings)


async def on_task(
    event: Event[TaskSubmitted], state: Progress | None, ctx: Context[Deps]
) -> Outcome[Progress]:
    deps = ctx.deps
    run = await run_agent(
        deps.agent,
        ctx,
        state.journal if state else None,
        lambda journal: Progress(journal=journal),
        limits=deps.settings.agent_limits,
        prices=Prices(deps.settings.llm_prices),
        user_prompt=f"Reserve 2 of {event.payload.task} for the order.",
        deps=deps.stock,
    )
    done = TaskDone(task=str(run.output), attempt=ctx.attempt, handled_count=run.journal.model_requests)
    return Outcome(state=Progress(journal=run.journal), emit=[done])


def make_spec(name: str) -> ServiceSpec[Progress, Deps]:
    return ServiceSpec(
        name=name,
        version="0.1.0",
        handlers=[On(TaskSubmitted, on_task, timeout_s=120, max_attempts=4, backoff_base_s=0.2)],
        produces=frozenset({"test.task_done"}),
        state=Progress,
        bootstrap=bootstrap,
    )


if __name__ == "__main__":
    import os

    main(make_spec(os.environ.get("TEST_SERVICE_NAME", "test_service")), Settings())
