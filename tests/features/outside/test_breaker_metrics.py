"""What /metrics says about circuit breakers: one series per dependency, whatever endpoints
callers name (a webhook receiver is the submitter's choice: a series per host would let
anyone grow the metrics without bound)."""

from __future__ import annotations

import uuid
from typing import cast

import asyncpg
from prometheus_client.parser import text_string_to_metric_families

from chorus.base.clock import ManualClock
from chorus.base.metrics import Metrics
from chorus.outside import breaker
from chorus.outside.breaker import BreakerState, CircuitBreaker
from chorus.outside.dependencies import Dependency


def scraped() -> dict[tuple[str, str], float]:
    metrics = Metrics("test")
    metrics.registry.register(breaker.BreakerCollector())  # as chorus.outside.feature plugs it
    return {
        (sample.name, sample.labels["dependency"]): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name.startswith("chorus_breaker")
    }


def test_endpoints_of_a_dependency_are_one_series_its_worst_state_and_their_sum() -> None:
    webhooks, llm = f"webhooks-{uuid.uuid4().hex[:8]}", f"llm-{uuid.uuid4().hex[:8]}"
    no_pool = cast(asyncpg.Pool, None)  # the metrics read what the process last saw; no call is made
    breakers = {
        host: CircuitBreaker(no_pool, Dependency(name=webhooks).keyed(host).name, clock=ManualClock())
        for host in ("a.example", "b.example", "c.example")
    }
    breakers["b.example"].state = BreakerState.OPEN
    breakers["b.example"].rejections = 3
    breakers["c.example"].state = BreakerState.HALF_OPEN
    breakers["c.example"].rejections = 1
    CircuitBreaker(no_pool, llm, clock=ManualClock())

    found = scraped()
    assert found[("chorus_breaker_state", webhooks)] == 2  # open: its worst endpoint
    assert found[("chorus_breaker_rejections_total", webhooks)] == 4
    assert found[("chorus_breaker_open_endpoints", webhooks)] == 1
    assert found[("chorus_breaker_state", llm)] == 0
    assert not [label for _, label in found if ":" in label]  # no endpoint in any label
