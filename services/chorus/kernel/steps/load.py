"""load: the inbox row and checkpoint this handling builds on (batched across lanes), and
the dedupe: an event this consumer group finished before is skipped."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from chorus.base.metrics import Metrics
from chorus.kernel.chain import Done, Finish, Item, Via
from chorus.kernel.coalesce import Coalescer
from chorus.kernel.store import InboxOutcome, Loaded, Store


@dataclass
class Load:
    store: Store
    group: str
    metrics: Metrics
    name: str = "load"
    _loads: Coalescer[tuple[uuid.UUID, str], Loaded] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Concurrent lanes share round trips: loads go in batches.
        self._loads = Coalescer(self._batch)

    async def _batch(self, keys: list[tuple[uuid.UUID, str]]) -> list[Loaded | BaseException]:
        return list(await self.store.load_many(self.group, keys))

    async def close(self) -> None:
        await self._loads.close()

    async def __call__(self, item: Item) -> Item | Done:
        env = item.decoded.envelope
        item.loaded = await self._loads.submit((env.event_id, env.workflow_id))
        if admitted(item.loaded, item.tries, item.via):
            return item
        self.metrics.duplicates.inc()
        if item.parked_id is not None:  # handled elsewhere already; drop the parked copy
            await self.store.unpark(item.parked_id)
        return Done(Finish.SKIPPED)


def admitted(loaded: Loaded, attempt: int, via: Via) -> bool:
    """Whether the inbox lets this attempt through: a new event; a later attempt of one
    retrying or dead-lettered (a durable retry, a redrive); a parked one being drained."""
    inbox = loaded.inbox
    if via is Via.DRAIN:
        return inbox is not None and inbox.outcome == InboxOutcome.PARKED
    if inbox is None:
        return True
    return inbox.outcome in (InboxOutcome.RETRYING, InboxOutcome.DEAD_LETTERED) and attempt > inbox.attempt
