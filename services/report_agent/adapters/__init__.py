"""Data sources, delivery and the LLM: the report agent's dependencies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from chorus.external import call_json
from chorus.llm import LLM, llm_dependency
from chorus_contracts.approvals import EscalationStep, Fallback
from chorus_contracts.research import GatheredSource, SourceRef


class Sources:
    """GET <source url> -> {"excerpt": ...}; failures map onto the taxonomy."""

    def __init__(self, client: httpx.AsyncClient, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s

    async def fetch(self, source: SourceRef, topic: str) -> GatheredSource:
        response = await call_json(
            self.client,
            "GET",
            source.url,
            what=f"source {source.name}",
            timeout_s=self.timeout_s,
            # The topic is user text: a query parameter (percent-encoded), never a header.
            params={"topic": topic},
            submitter_url=True,
        )
        return GatheredSource(name=source.name, excerpt=str(response.json()["excerpt"])[:2000])


class Delivery:
    def __init__(self, client: httpx.AsyncClient, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s

    async def deliver(self, url: str, report: dict[str, Any], key: str) -> int:
        response = await call_json(
            self.client,
            "POST",
            url,
            what="report delivery",
            json=report,
            headers={"Idempotency-Key": key},
            timeout_s=self.timeout_s,
            submitter_url=True,
        )
        return response.status_code


@dataclass(frozen=True)
class Deps:
    llm: LLM
    sources: Sources
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
            sources=Sources(client, settings.source_timeout_s),
            delivery=Delivery(client, settings.delivery_timeout_s),
            chain=list(settings.approval_chain),
            fallback=settings.approval_fallback,
            llm_timeout_s=settings.llm_timeout_s,
        )
