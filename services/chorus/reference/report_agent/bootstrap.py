"""Wiring: what the report agent's handlers get (model, delivery, chain)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from chorus.contracts.approvals import EscalationStep, Fallback
from chorus.llm import LLM, llm_dependency
from chorus.reference.report_agent.adapters.delivery import Delivery


@dataclass(frozen=True)
class Deps:
    llm: LLM
    delivery: Delivery
    chain: list[EscalationStep]
    fallback: Fallback
    llm_timeout_s: float = 120.0


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[Deps]:
    async with (
        httpx.AsyncClient() as client,
        llm_dependency(settings) as llm,
    ):
        yield Deps(
            llm=llm,
            delivery=Delivery(client, settings.delivery_timeout_s),
            chain=list(settings.approval_chain),
            fallback=settings.approval_fallback,
            llm_timeout_s=settings.llm_timeout_s,
        )
