"""Moving one in-flight workflow to another release of its service (an operator's act).

Pinning (chorus.releases.pinning) keeps a workflow on the release that started it until it
ends. When a canary is removed before its workflows end, an operator moves them one by one
(``chorus rollout repin``): the rollout service publishes ``workflow.repin_requested`` on
chorus.control; every release of the service reads it, and the one that owns the workflow
moves it (the checkpoint row names the new release) or refuses, and answers with
``workflow.repin_answered`` in the same transaction.

A move must lose no event and take none twice, although both releases read every event,
each at its own pace. The owner moves a workflow only when it is quiet:

- it has a checkpoint here (every step of a workflow with one checks its revision, and
  the move is the next revision; a step decided without one could land after the move);
- it has no retry, dead letter or parked event of it pending (those are addressed to
  its own group);
- the new release has not passed an event of it (``not_mine``) that the owner has not
  finished (done, reviewed, discarded, dropped) yet: after the move, nobody would. Every
  ``not_mine`` decision is recorded under the row's lock, after checking that the row
  still names the release it decided on, so none can slip between the check and the move.

Not checked: that the new release reads the checkpoint's state version. One that cannot
refuses the next event (``NewerStateError``, dead-lettered, nothing written); move the
workflow back, or run a release that reads it.

After the move, the new owner skips an event the old one already took (it looks in the old
owner's inbox, ``StateRow.repinned_from``), and a step the old one decided before the move
cannot commit (the move is the checkpoint's next revision): it reloads, and finds the
workflow no longer its own. A refusal says why; the operator asks again a moment later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import asyncpg

from chorus.base.logs import fields
from chorus.contracts.envelope import Envelope
from chorus.contracts.rollouts import RepinAnswered, RepinOutcome, RepinRequested
from chorus.kernel.answering import Answering
from chorus.kernel.chain import Done, Finish, Item
from chorus.kernel.store import InboxOutcome
from chorus.releases.rollouts import MAIN_RELEASE, RolloutView, release_group
from chorus.releases.store import PinRow, PinStore

log = logging.getLogger("chorus.repin")


@dataclass
class Repins:
    via: Answering
    pins: PinStore
    base_group: str
    identity: str
    """What pins call this release."""
    view: RolloutView
    state_version: int
    handled_types: tuple[str, ...]
    """The event types this service handles (the only ones its inbox records)."""

    def addressed(self, item: Item) -> bool:
        """Only an operator's request (through the rollout service) about this service counts;
        its signature is checked before it is acted on."""
        request = item.decoded.payload
        assert isinstance(request, RepinRequested)
        return request.service == self.via.producer.service

    async def __call__(self, item: Item) -> Done:
        request = item.decoded.payload
        assert isinstance(request, RepinRequested)
        await self.answer(item.decoded.envelope, request)
        return Done(Finish.CONTROL)

    async def answer(self, envelope: Envelope, request: RepinRequested) -> None:
        workflow_id = envelope.workflow_id
        async with self.via.transaction() as (conn, tx):
            if await self.pins.inbox_outcome(conn, self.via.group, envelope.event_id) is not None:
                return  # answered (or passed) already
            # Under the workflow's lock and its row's: no release passes an event of it meanwhile.
            await self.pins.lock_pin(conn, workflow_id)
            row = await self.pins.pin_of(conn, workflow_id, lock=True)
            owner = self._owner(row, request)
            mine = owner == self.identity
            recorded = InboxOutcome.DONE if mine else InboxOutcome.NOT_MINE
            if not await self.via.claim(conn, envelope, recorded) or not mine:
                return
            outcome, reason = await self._decide(conn, workflow_id, row, request.to_release)
            if outcome == "repinned":
                await self.pins.move_pin(
                    conn,
                    workflow_id=workflow_id,
                    release=request.to_release,
                    from_group=self.via.group,
                    now=self.via.clock.now(),
                )
            answer = RepinAnswered(
                service=request.service,
                request_id=str(envelope.event_id),
                from_release=self.identity,
                to_release=request.to_release,
                outcome=outcome,
                reason=reason,
            )
            await tx.publish(self.via.answer(envelope, answer, position="answer"))
        log.warning(
            "re-pin %s",
            outcome,
            extra=fields(
                workflow_id=workflow_id,
                to_release=request.to_release,
                by=request.requested_by,
                why=request.reason,
                refused_because=reason,
            ),
        )

    def _owner(self, row: PinRow | None, request: RepinRequested) -> str:
        """Who owns the workflow, as pinning would decide (chorus.releases.pinning)."""
        if row is not None and row.release is not None:
            return row.release
        if request.from_release is not None:
            return request.from_release
        policy = self.view.policy(request.service)
        return policy.stable if policy is not None else MAIN_RELEASE

    async def _decide(
        self, conn: asyncpg.Connection, workflow_id: str, row: PinRow | None, to: str
    ) -> tuple[RepinOutcome, str | None]:
        if to == self.identity:
            return "unchanged", None
        if row is None:
            # Only a checkpoint can move: a step of this release decided without one (its
            # first here, or any of a service that keeps none) commits with no revision to
            # check, so it could still land after a move.
            return "refused", (
                f"this service holds no checkpoint of it yet (not reached here, or its handlers "
                f"keep none): its events go to release {self.identity}, as pinned"
            )
        if row.ended is not None:
            return "refused", f"the workflow ended here ({row.ended})"
        pending = await self.pins.pending_in(conn, self.via.group, workflow_id)
        if pending or row.parked_on is not None or row.has_parked:
            return "refused", (
                f"a retry, a dead letter or a parked event of it waits in release {self.identity}; "
                "ask again once it has run (or the dead letter is resolved)"
            )
        passed = await self.pins.passed_unhandled(
            conn,
            workflow_id=workflow_id,
            passer=release_group(self.base_group, to),
            owner=self.via.group,
            event_types=self.handled_types,
        )
        if passed:
            return "refused", (
                f"release {to} passed {passed} event(s) of it that release {self.identity} has not "
                "taken yet; ask again in a moment"
            )
        return "repinned", None
