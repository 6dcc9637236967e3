"""Gauges of what waits for an operator, refreshed from the letters table.

- ``chorus_deadletters_open{service, category}``: open letters (the DLQ depth).
- ``chorus_deadletters_oldest_open_age_seconds{service}``: how long the oldest open
  letter of a service has waited since it was dead-lettered.

Every replica computes the same numbers from PostgreSQL, so any one can be scraped.
A label set whose letters were all resolved drops to 0 rather than vanishing, so an
alert on "> 0" resolves instead of going stale.
"""

from __future__ import annotations

import logging

from chorus.base.loops import forever
from chorus.kernel.service import RuntimeHandle
from chorus.platform.deadletter_service.adapters import repository as repo
from chorus.platform.deadletter_service.domain import age_s

log = logging.getLogger("chorus.platform.deadletter_service.metrics")


class DeadLetterGauges:
    """The open dead letters of every service, labelled service_name: a scrape attaches the
    dead-letter service's own name as the target's service label, which would overwrite a
    label named service (Prometheus keeps the target's unless honor_labels)."""

    def __init__(self, rt: RuntimeHandle) -> None:
        self.open = rt.metrics.gauge(
            "chorus_deadletters_open",
            "Dead letters waiting for redrive or discard",
            ["service_name", "category"],
        )
        self.oldest_age = rt.metrics.gauge(
            "chorus_deadletters_oldest_open_age_seconds",
            "Age of the oldest open dead letter, since it was dead-lettered",
            ["service_name"],
        )
        self._seen_depth: set[tuple[str, str]] = set()
        self._seen_age: set[str] = set()

    async def refresh(self, rt: RuntimeHandle) -> None:
        async with rt.pool.acquire() as conn:
            depths = await repo.open_depth(conn)
        now = rt.clock.now()
        depth = {(d.service, d.category): d.count for d in depths}
        oldest: dict[str, float] = {}
        for d in depths:
            oldest[d.service] = max(oldest.get(d.service, 0.0), age_s(now, d.oldest))
        for key in self._seen_depth - depth.keys():
            self.open.labels(*key).set(0)
        for service in self._seen_age - oldest.keys():
            self.oldest_age.labels(service).set(0)
        for key, count in depth.items():
            self.open.labels(*key).set(count)
        for service, age in oldest.items():
            self.oldest_age.labels(service).set(age)
        self._seen_depth |= depth.keys()
        self._seen_age |= oldest.keys()


async def export_gauges(rt: RuntimeHandle) -> None:
    """Worker: refresh the gauges every ``metrics_interval_s``; survives database outages."""
    gauges = DeadLetterGauges(rt)

    async def refresh() -> None:  # a failed round leaves the numbers stale; the next fixes them
        await gauges.refresh(rt)

    await forever("dead-letter gauges", refresh, every_s=rt.settings.metrics_interval_s, sleep=rt.clock.sleep)
