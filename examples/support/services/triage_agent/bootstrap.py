"""Wiring: what triage_agent's handlers get (clients, repositories), built once per process.
Nothing connects at import time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from chorus.contracts.approvals import EscalationStep
from chorus.llm import AgentLoop, Prices, agent_model

from triage_agent.adapters.outside import Crm, Helpdesk, crm_tools
from triage_agent.config import Settings


@dataclass(frozen=True)
class Deps:
    """What a handler may use besides its event and state (``ctx.deps``)."""

    agent: AgentLoop
    """The model with the CRM's tools, turn after turn until it answers (chorus.llm.AgentLoop)."""
    helpdesk: Helpdesk
    refund_threshold_cents: int
    approval_chain: list[EscalationStep]
    reply_within_s: float


@asynccontextmanager
async def bootstrap(settings: Settings) -> AsyncIterator[Deps]:
    async with httpx.AsyncClient(timeout=10.0) as client, agent_model(settings) as model:
        crm = Crm(client, settings.crm_url)
        yield Deps(
            agent=AgentLoop(
                model,
                crm_tools(crm),
                prices=Prices(settings.llm_prices),
                limits=settings.agent_limits,
                limits_by_type=settings.agent_limits_by_type,
                stream_every_s=settings.agent_stream_every_s,
                timeout_s=settings.llm_timeout_s,
                name="triage",
            ),
            helpdesk=Helpdesk(client, settings.helpdesk_url),
            refund_threshold_cents=settings.refund_threshold_cents,
            approval_chain=list(settings.approval_chain),
            reply_within_s=settings.reply_within_s,
        )
