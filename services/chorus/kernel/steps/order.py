"""order: a workflow's events are handled in arrival order. One that arrives while the
workflow waits on an earlier event (a retry, a dead letter) is parked; the parked ones are
drained, in order, once it stops waiting (``chain.Drain``). The workflow's end overtakes
whatever waits: nothing behind it will run."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from chorus.base.clock import Clock
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.kernel.chain import Done, Drain, Finish, Item, Via
from chorus.kernel.store import Claim, InboxOutcome, Store

log = logging.getLogger("chorus.pipeline")


@dataclass
class Order:
    store: Store
    group: str
    clock: Clock
    name: str = "order"

    async def __call__(self, item: Item) -> Item | Done:
        assert item.loaded is not None
        env, state = item.decoded.envelope, item.loaded.state
        waiting_on = state.parked_on if state is not None else None
        ended = state.ended if state is not None else None
        overtakes = env.event_type == WorkflowEnded.event_type or ended is not None
        if item.via is not Via.DRAIN and waiting_on not in (None, env.event_id) and not overtakes:
            claim = Claim(
                self.group,
                env.event_id,
                item.tries,
                InboxOutcome.PARKED,
                env.event_type,
                env.workflow_id,
                self.clock.now(),
            )
            if await self.store.park(claim, item.record):
                log.info("workflow is waiting on an earlier event; parked this one")
            return Done(Finish.PARKED)
        if item.via is Via.DELIVERY and item.loaded.has_parked and waiting_on is None:
            # A crash interrupted an earlier drain: finish it, then this record, in order.
            item.at = "load"
            return Done(Finish.DEFERRED, then=(Drain(env.workflow_id), item))
        return item
