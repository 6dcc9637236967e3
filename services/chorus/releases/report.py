"""What this replica of a release did lately, reported to the rollout service.

Every replica keeps its step latencies since its last report (read from Kafka to the
step's commit, the latency a user of the release feels) and publishes them as
``release.reported`` on ``chorus.releases``: that the release runs, how many steps it
took, their p50 and p99. The rollout service shows releases side by side from these.
"""

from __future__ import annotations

import random
import uuid
from datetime import datetime

from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.rollouts import ReleaseReported
from chorus.kernel.envelopes import start_envelope

MAX_SAMPLES = 10_000
"""Latencies kept per window (a uniform sample of them beyond that: reservoir sampling)."""


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, interpolated between closest ranks."""
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class ReleaseWindow:
    """Steps of this replica since ``start``."""

    def __init__(self, start: datetime, rng: random.Random | None = None) -> None:
        self.start = start
        self.steps = 0
        self.not_mine = 0
        self._samples: list[float] = []
        self._rng = rng or random.Random()

    def step(self, seconds: float) -> None:
        self.steps += 1
        if len(self._samples) < MAX_SAMPLES:
            self._samples.append(seconds)
        else:
            slot = self._rng.randrange(self.steps)
            if slot < MAX_SAMPLES:
                self._samples[slot] = seconds

    def skipped(self) -> None:
        self.not_mine += 1

    @property
    def idle(self) -> bool:
        return not self.steps and not self.not_mine

    def report(self, service: str, release: str, group: str, instance: str, end: datetime) -> ReleaseReported:
        ordered = sorted(self._samples)
        return ReleaseReported(
            service=service,
            release=release,
            consumer_group=group,
            instance=instance,
            window_start=self.start,
            window_end=end,
            steps=self.steps,
            not_mine=self.not_mine,
            p50_ms=round(quantile(ordered, 0.5) * 1000, 3) if ordered else None,
            p99_ms=round(quantile(ordered, 0.99) * 1000, 3) if ordered else None,
        )


def report_envelope(report: ReleaseReported, producer: ProducerRef, now: datetime) -> Envelope:
    """The envelope of a report: keyed by the release, so one release's reports stay in order."""
    workflow_id = f"release:{report.service}:{report.release}"
    return start_envelope(
        report,
        workflow_id=workflow_id,
        workflow_type="release",
        producer=producer,
        now=now,
        idempotency_key=str(uuid.uuid4()),
    )
