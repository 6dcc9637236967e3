"""Calls outside Chorus plugged into a service: its circuit breakers on /metrics and /health."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chorus.kernel.recordpath import Plugs
from chorus.kernel.runner import Parts
from chorus.outside import breaker


class Breakers:
    async def plug(self, parts: Parts) -> Plugs:
        parts.metrics.registry.register(breaker.BreakerCollector())
        return Plugs(health=[self.health])

    @staticmethod
    def health() -> Mapping[str, Any]:
        return {"breakers": {b.name: b.state.value for b in breaker.known()}}
