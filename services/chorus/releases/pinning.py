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

from dataclasses import dataclass
from enum import Enum

from chorus.kernel.store import StateRow
from chorus.releases.rollouts import RolloutView
from chorus_contracts.envelope import Envelope


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
