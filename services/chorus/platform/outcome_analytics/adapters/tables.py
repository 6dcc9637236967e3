"""The view's state in faust tables, each backed by a compacted changelog topic.

- ``workflows``: workflow id -> :class:`WorkflowState` (JSON), keyed as the facts are, so
  a workflow's state lives on the partition its facts come in on.
- ``hourly``: a tumbling one-hour windowed table of bucket *shares*. Its key is
  ``"<partition>:<workflow type>"``: faust writes a table's change to the changelog
  partition of the fact being processed, so a bucket written from two partitions must be
  two keys, or the two changelog partitions would hold rival totals of one bucket and a
  restore would keep whichever it read last. Reading sums the shares.

The window is the hour of the *event* (its ``occurred_at``), chosen per change: folding a
fact can touch a bucket of another hour (a dead letter moving from ``unknown`` to its
type), so the table is relative to the hour :meth:`TableStore.add` sets, not to a field.

A replica holds its active partitions and, with standby replicas, the others' too:
with ``table_standby_replicas`` one less than the replicas, every replica answers for
the whole view (the standby partitions trail by the time to read their changelog).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

import faust
from faust.types import EventT, TableT

from chorus.platform.outcome_analytics.domain import Bucket, BucketKey, WorkflowState

_WRITING_HOUR: ContextVar[float] = ContextVar("writing_hour")


def _writing_hour(event: EventT[Any] | None) -> float:
    return _WRITING_HOUR.get()


class TableStore:
    """:class:`~chorus.platform.outcome_analytics.domain.ViewStore` over faust tables.

    Writes happen only inside the view's agent (faust sends each change to the changelog
    partition of the current event); reads may happen anywhere on the loop.
    """

    def __init__(self, workflows: TableT[str, Any], hourly: Any, *, partition: Callable[[], int]) -> None:
        self.workflows = workflows
        self.hourly = hourly
        self._partition = partition

    @classmethod
    def declare(cls, app: faust.App, *, partitions: int) -> TableStore:
        """The two tables on ``app`` (changelog topics ``<app id>-<table>-changelog``).

        No key or value type: faust then (de)serializes both as JSON."""
        # standby_buffer_size=1: faust applies a standby's changelog records in batches of
        # this size (1000 by default), so a quiet view's standby copy would never update.
        workflows = app.Table("workflows", partitions=partitions, standby_buffer_size=1)
        # No ``expires``: faust 0.15.3 expires windows by the wall clock, not event time, and
        # drops them from memory without a tombstone in the changelog; the next change of
        # such a bucket then starts it from zero, and a restart restores the old total.
        # The view keeps every hour (a few keys per type and hour; compaction keeps one).
        hourly: Any = app.Table("hourly", partitions=partitions, standby_buffer_size=1).tumbling(3600.0)
        # WindowWrapperT's stub lacks relative_to (faust's own WindowWrapper has it).
        hourly = hourly.relative_to(_writing_hour)
        return cls(workflows, hourly, partition=_current_partition)

    def state(self, key: str) -> WorkflowState | None:
        raw = self.workflows.get(key)
        return None if raw is None else WorkflowState.model_validate(raw)

    def put_state(self, key: str, state: WorkflowState) -> None:
        self.workflows[key] = state.model_dump(mode="json")

    def add(self, key: BucketKey, change: Bucket) -> None:
        share = f"{self._partition()}:{key.workflow_type}"
        token = _WRITING_HOUR.set(key.hour.timestamp())
        try:
            try:
                bucket = Bucket.from_json(self.hourly[share].value())
            except KeyError:  # the first change of this share of the bucket
                bucket = Bucket()
            bucket.merge(change)
            self.hourly[share] = bucket.to_json()
        finally:
            _WRITING_HOUR.reset(token)

    def states(self) -> Iterator[WorkflowState]:
        for raw in list(self.workflows.values()):
            yield WorkflowState.model_validate(raw)

    def shares(self) -> Iterable[tuple[BucketKey, Bucket]]:
        for (share, (start, _end)), raw in list(self.hourly.table.items()):
            _partition, workflow_type = share.split(":", 1)
            hour = datetime.fromtimestamp(start, timezone.utc)
            yield BucketKey(workflow_type, hour), Bucket.from_json(raw)


def _current_partition() -> int:
    event = faust.current_event()
    if event is None:
        raise RuntimeError("the view's tables change only inside its agent")
    return event.message.partition
