"""Calls outside Chorus plugged into a service: its circuit breakers on /metrics and /health,
and the tokens its language model calls used on /metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chorus.kernel.recordpath import Plugs
from chorus.kernel.runner import Parts
from chorus.outside import breaker
from chorus.outside.llm import usage


class Breakers:
    async def plug(self, parts: Parts) -> Plugs:
        parts.metrics.registry.register(breaker.BreakerCollector())
        parts.metrics.registry.register(usage.TokenUsageCollector())
        return Plugs(health=[self.health])

    @staticmethod
    def health() -> Mapping[str, Any]:
        return {"breakers": {b.name: b.state.value for b in breaker.known()}}
