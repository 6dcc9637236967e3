"""Whose event is it: the release of this service that a workflow is pinned to.

Every release of a service reads every event (each in its consumer group) and handles only
those of the workflows pinned to it; the others are recorded in its inbox as ``not_mine``
(no handler runs, the offset moves on). The owner of an event, in order:

1. the release in the workflow's checkpoint row (``state.release``): whichever release
   first handled the workflow here, or claimed it for another;
2. the release the envelope's pins name for this service (set when the workflow started);
3. neither (a workflow started before pinning existed, or produced straight onto a topic):
   the stable release of the service's policy, **claimed** in the checkpoint row before
   anything else happens, so that two releases reading the policy a moment apart cannot
   both take the workflow, or both leave it; with no policy at all, the release that runs
   in the service's own consumer group (the deployment without ``CHORUS_RELEASE``).

Rules 1 and 2 never change for an event once written, so every release decides the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import asyncpg

from chorus.base.clock import Clock
from chorus.base.logs import fields
from chorus.base.metrics import Metrics
from chorus.contracts.envelope import Envelope
from chorus.kernel.chain import Again, Done, Finish, Item
from chorus.kernel.store import StateRow
from chorus.releases.report import ReleaseWindow
from chorus.releases.rollouts import RolloutView
from chorus.releases.store import PinStore

log = logging.getLogger("chorus.pipeline")


class Verdict(Enum):
    MINE = "mine"
    NOT_MINE = "not_mine"
    CLAIM = "claim"
    """Nobody owns the workflow yet and its events carry no pin: claim it for ``owner``."""


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    owner: str | None
    """The owning release (None: the release in the service's own group, unnamed)."""


@dataclass(frozen=True)
class Pinning:
    service: str
    release: str
    """This deployment's label (producer version of what it publishes)."""
    named: bool
    """Started with an explicit ``CHORUS_RELEASE`` (own consumer group): it owns only what
    is pinned to it. The unnamed deployment also owns what nothing pins anywhere."""
    view: RolloutView

    def decide(self, envelope: Envelope, row: StateRow | None) -> Decision:
        owner = row.release if row is not None else None
        if owner is None and envelope.pins is not None:
            owner = envelope.pins.get(self.service)
        if owner is not None:
            return Decision(Verdict.MINE if owner == self.release else Verdict.NOT_MINE, owner)
        policy = self.view.policy(self.service)
        if policy is None:
            return Decision(Verdict.NOT_MINE if self.named else Verdict.MINE, None)
        return Decision(Verdict.CLAIM, policy.stable)


@dataclass
class Pin:
    """pin: the record path's step that hands a workflow's events to its own release only.

    Another release's workflow is recorded in this group's inbox as ``not_mine`` (no handler
    runs, the offset moves on). A workflow nobody owns yet is claimed for the policy's stable
    release first, and the item runs again from ``load`` (the checkpoint row now names its
    owner); so does one an operator moved to another release meanwhile (chorus.releases.repin).
    """

    pinning: Pinning
    pins: PinStore
    pool: asyncpg.Pool
    group: str
    state_version: int
    clock: Clock
    metrics: Metrics
    window: Callable[[], ReleaseWindow]
    """This replica's current report window (chorus.releases.report)."""
    name: str = "pin"

    async def __call__(self, item: Item) -> Item | Done | Again:
        assert item.loaded is not None
        env, loaded = item.decoded.envelope, item.loaded
        decision = self.pinning.decide(env, loaded.state)
        if decision.verdict is Verdict.CLAIM:
            assert decision.owner is not None
            await self._claim(env, decision.owner)
            return Again("load")  # the checkpoint row now names the owner
        if decision.verdict is Verdict.NOT_MINE or loaded.handled_before:
            # Another release's; or moved here from one that took this event before the move.
            if not await self._not_mine(env, item.tries, decision.owner, loaded.state):
                return Again("load")  # moved to another release meanwhile: decide again
            return Done(Finish.SKIPPED)
        return item

    async def _claim(self, env: Envelope, owner: str) -> None:
        async with self.pool.acquire() as conn:
            pinned = await self.pins.claim_release(
                conn,
                workflow_id=env.workflow_id,
                workflow_type=env.workflow_type,
                release=owner,
                state_version=self.state_version,
                now=self.clock.now(),
            )
        log.info("a workflow without a pin; claimed for the stable release", extra=fields(release=pinned))

    async def _not_mine(
        self, env: Envelope, attempt: int, owner: str | None, decided_on: StateRow | None
    ) -> bool:
        """Recorded as another release's; False (nothing recorded) when the workflow was
        moved to another release since the decision, or the event was recorded meanwhile."""

        async def passed(conn: asyncpg.Connection, pinned_to: str | None) -> bool:
            return await self.pins.pass_event(
                conn,
                group=self.group,
                event_id=env.event_id,
                attempt=attempt,
                event_type=env.event_type,
                workflow_id=env.workflow_id,
                pinned_to=pinned_to,
                now=self.clock.now(),
            )

        async with self.pool.acquire() as conn:
            if decided_on is not None and decided_on.release is not None:
                recorded = await passed(conn, decided_on.release)
            else:
                # No pin in the row yet: a move would create one; wait for it under its lock.
                async with conn.transaction():
                    await self.pins.lock_pin(conn, env.workflow_id)
                    now_on = await self.pins.pin_of(conn, env.workflow_id)
                    moved = now_on is not None and now_on.release not in (None, owner)
                    recorded = not moved and await passed(conn, None)
        if not recorded:
            return False
        self.metrics.not_mine.labels(env.event_type).inc()
        self.window().skipped()
        log.debug("pinned to another release", extra=fields(owner=owner or "unnamed"))
        return True
