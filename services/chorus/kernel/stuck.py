"""Records that keep failing for an infrastructure reason: counted, named, made visible.

Only Kafka or PostgreSQL being unavailable may hold a record (and its partition)
back, and the runtime retries such a record for as long as it takes. That is right
when the database really is down, and wrong when something else is going on; either
way an operator must see it. Once one record has been failing for longer than
``alert_after_s``, it is listed in ``/health`` (and ``chorus status``), the gauge
``chorus_records_stuck`` rises and one error line names topic, partition and offset.
Retrying goes on; when the record finally commits, it leaves the list.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from chorus.base.logs import fields
from chorus.base.metrics import Metrics
from chorus.kernel.records import Record

log = logging.getLogger("chorus.stuck")


@dataclass
class StuckRecord:
    topic: str
    partition: int
    offset: int
    workflow_key: str
    failing_since: datetime
    attempts: int
    error: str

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "failing_since": self.failing_since.isoformat()}


@dataclass
class _Failing:
    started: float
    since: datetime
    attempts: int = 0
    alerted: bool = False


class StuckRecords:
    def __init__(
        self,
        alert_after_s: float,
        metrics: Metrics | None = None,
        wall_clock: Callable[[], datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.alert_after_s = alert_after_s
        self.metrics = metrics
        self._wall_clock = wall_clock or (lambda: datetime.now().astimezone())
        self._monotonic = monotonic
        self._failing: dict[int, _Failing] = {}
        self._stuck: dict[int, StuckRecord] = {}

    def failed(self, record: Record, error: BaseException) -> None:
        """One more infrastructure failure of ``record`` (it will be retried)."""
        key = id(record)
        failing = self._failing.get(key)
        if failing is None:
            failing = self._failing[key] = _Failing(self._monotonic(), self._wall_clock())
        failing.attempts += 1
        waited = self._monotonic() - failing.started
        if waited < self.alert_after_s:
            return
        self._stuck[key] = StuckRecord(
            record.topic,
            record.partition,
            record.offset,
            record.workflow_key,
            failing.since,
            failing.attempts,
            repr(error)[:500],
        )
        if failing.alerted:
            return
        failing.alerted = True
        if self.metrics is not None:
            self.metrics.records_stuck.set(len(self._stuck))
            self.metrics.stuck_alerts.labels(record.topic or "(drain)").inc()
        log.error(
            "record stuck: failing for an infrastructure reason for %.0fs; still retrying",
            waited,
            extra=fields(
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                attempts=failing.attempts,
                error=repr(error)[:500],
            ),
        )

    def finished(self, record: Record) -> None:
        """``record`` committed (or was abandoned on shutdown or revocation)."""
        key = id(record)
        self._failing.pop(key, None)
        if self._stuck.pop(key, None) is not None:
            log.warning(
                "stuck record recovered",
                extra=fields(topic=record.topic, partition=record.partition, offset=record.offset),
            )
            if self.metrics is not None:
                self.metrics.records_stuck.set(len(self._stuck))

    def snapshot(self) -> list[StuckRecord]:
        return sorted(self._stuck.values(), key=lambda s: (s.topic, s.partition, s.offset))
