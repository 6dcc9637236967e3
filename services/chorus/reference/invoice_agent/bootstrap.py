"""Wiring: what the invoice agent's handlers get (the language model, from settings)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from chorus.llm import LLM, llm_dependency


@dataclass(frozen=True)
class Deps:
    llm: LLM
    llm_timeout_s: float = 120.0
    validated_version: int = 3
    """The version of invoice.validated this release publishes (Settings.validated_version)."""


@asynccontextmanager
async def bootstrap(settings: Any) -> AsyncIterator[Deps]:
    async with llm_dependency(settings) as llm:
        yield Deps(
            llm=llm, llm_timeout_s=settings.llm_timeout_s, validated_version=settings.validated_version
        )
