"""Wiring: what triage_agent's handlers get (clients, repositories), built once per process.
Nothing connects at import time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from chorus.contracts.approvals import EscalationStep
from chorus.llm import LLM, llm_dependency

from triage_agent.adapters.outside import Crm, Helpdesk
from triage_agent.config import Settings


@dataclass(frozen=True)
class Deps:
    """What a handler may use besides its event and state (``ctx.deps``)."""

    llm: LLM
    crm: Crm
    helpdesk: Helpdesk
    refund_threshold_cents: int
    approval_chain: list[EscalationStep]
    reply_within_s: float


@asynccontextmanager
async def bootstrap(settings: Settings) -> AsyncIterator[Deps]:
    async with httpx.AsyncClient(timeout=10.0) as client, llm_dependency(settings) as llm:
        yield Deps(
            llm=llm,
            crm=Crm(client, settings.crm_url),
            helpdesk=Helpdesk(client, settings.helpdesk_url),
            refund_threshold_cents=settings.refund_threshold_cents,
            approval_chain=list(settings.approval_chain),
            reply_within_s=settings.reply_within_s,
        )
