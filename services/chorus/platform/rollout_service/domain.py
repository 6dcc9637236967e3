"""Rollout decisions, without I/O: how a policy changes, and when a canary has done worse.

A policy moves through ``canary`` (start; set shifts its percent) to ``promoted`` (the
canary becomes stable for new workflows; the old stable drains what is pinned to it) or
``rolled_back`` (new workflows go to stable again; the canary finishes what is pinned to
it). A new rollout can start from either end state. Every change is a new revision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chorus.contracts.rollouts import AutoRollback, RepinRequested, RolloutAction, RolloutChanged
from chorus.releases.rollouts import MAIN_RELEASE

FAILING_CATEGORIES = frozenset({"persistent", "semantic", "unexpected"})
"""Failures that count against a release: persistent and semantic ones, and a handler's
unexpected exception once its retries are spent (a bug). Transient ones retry and usually
pass; undecodable and unauthorized input says nothing about the release."""


class ChangeRefused(Exception):
    """The change cannot be made: ``status`` 404 (no rollout), 409 (not in a state that
    allows it) or 422 (a field is wrong, named by ``pointer``)."""

    def __init__(self, status: int, message: str, pointer: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.pointer = status, message, pointer


@dataclass(frozen=True)
class Change:
    """What an operator (or the rule) asks for."""

    action: RolloutAction
    actor: str
    reason: str | None = None
    stable: str | None = None
    canary: str | None = None
    percent: float | None = None
    workflow_types: tuple[str, ...] = ()
    auto_rollback: AutoRollback | None = None


def apply_change(service: str, current: RolloutChanged | None, change: Change) -> RolloutChanged:
    """The policy after ``change``; :class:`ChangeRefused` when it does not apply."""
    if change.action == "start":
        return _start(service, current, change)
    if current is None:
        raise ChangeRefused(404, f"{service} has no rollout; start one first")
    if current.status != "canary":
        raise ChangeRefused(
            409, f"{service} has no canary running (its rollout is {current.status.replace('_', ' ')})"
        )
    common = {
        "revision": current.revision + 1,
        "action": change.action,
        "changed_by": change.actor,
        "reason": change.reason,
    }
    if change.action == "set":
        percent = _percent(change.percent)
        return current.model_copy(update={**common, "percent": percent})
    if change.action == "promote":
        return current.model_copy(
            update={**common, "stable": current.canary, "canary": None, "percent": 0, "status": "promoted"}
        )
    # rollback, auto_rollback: the canary keeps its name, so the record says what was rolled back
    return current.model_copy(update={**common, "percent": 0, "status": "rolled_back"})


def _start(service: str, current: RolloutChanged | None, change: Change) -> RolloutChanged:
    if current is not None and current.status == "canary":
        raise ChangeRefused(
            409,
            f"{service} already has canary {current.canary} at {current.percent:g}%: "
            "promote it or roll it back first",
        )
    if current is None and change.stable not in (None, MAIN_RELEASE):
        # Before its first policy, every release decides that unpinned work is the main
        # release's; a first policy naming another stable would disagree for a moment.
        raise ChangeRefused(
            422, f"a service's first rollout starts from its main release ({MAIN_RELEASE})", "/stable"
        )
    stable = change.stable or (current.stable if current is not None else MAIN_RELEASE)
    if change.canary is None:
        raise ChangeRefused(422, "the release to try is needed", "/canary")
    if change.canary == stable:
        raise ChangeRefused(422, f"the canary is the stable release ({stable})", "/canary")
    return RolloutChanged(
        service=service,
        revision=current.revision + 1 if current is not None else 1,
        stable=stable,
        canary=change.canary,
        percent=_percent(change.percent),
        workflow_types=list(change.workflow_types),
        status="canary",
        action="start",
        reason=change.reason,
        changed_by=change.actor,
        auto_rollback=change.auto_rollback,
    )


def repin_request(
    service: str,
    policy: RolloutChanged | None,
    pinned_to: str,
    ended: str | None,
    to: str,
    actor: str,
    reason: str,
) -> RepinRequested:
    """An operator's move of one workflow (pinned to ``pinned_to`` at ``service``) to the
    rollout's stable or canary release, or ChangeRefused saying why it does not apply."""
    if policy is None:
        raise ChangeRefused(409, f"{service} has no rollout: one release takes every workflow")
    if ended is not None:
        raise ChangeRefused(409, f"the workflow ended ({ended}); nothing to move")
    releases = [r for r in (policy.stable, policy.canary) if r is not None and _takes_work(policy, r)]
    if to not in releases:
        raise ChangeRefused(
            422, f"{to!r} is not a release of {service}'s rollout ({', '.join(releases)})", "/to"
        )
    if to == pinned_to:
        raise ChangeRefused(409, f"the workflow is pinned to {to} already")
    return RepinRequested(
        service=service, to_release=to, from_release=pinned_to, requested_by=actor, reason=reason
    )


def _takes_work(policy: RolloutChanged, release: str) -> bool:
    """A release a workflow may be moved to: stable, or a canary still on trial (not one
    rolled back: that is the release being removed)."""
    return release == policy.stable or policy.status == "canary"


def _percent(value: float | None) -> float:
    if value is None:
        raise ChangeRefused(422, "the canary's share of new workflows is needed (0 to 100)", "/percent")
    if not 0 <= value <= 100:
        raise ChangeRefused(422, f"{value:g} is not a share between 0 and 100", "/percent")
    return value


@dataclass(frozen=True)
class Outcomes:
    """How the workflows pinned to one release are doing so far.

    Rates are over every workflow pinned to the release, finished or not: stable and canary
    take new workflows side by side, so both count failures that are still to come alike.
    (Over finished workflows only, a canary would look worse early on: a failure shows at
    once, a success only when its workflow ends, maybe after a person approved it.)"""

    release: str
    workflows: int = 0
    failed: int = 0
    """Workflows with a persistent, semantic or unexpected failure on this release."""
    dead_lettered: int = 0
    """Workflows with a dead letter of this release."""

    def failure_rate(self) -> float:
        return self.failed / self.workflows if self.workflows else 0.0

    def dead_letter_rate(self) -> float:
        return self.dead_lettered / self.workflows if self.workflows else 0.0


def judge(policy: RolloutChanged, stable: Outcomes, canary: Outcomes) -> str | None:
    """Why the canary must be rolled back under the policy's rule, or None."""
    rule = policy.auto_rollback
    if rule is None or policy.status != "canary" or canary.workflows < rule.min_workflows:
        return None
    checks = (
        (
            "failed (persistent or semantic)",
            canary.failure_rate(),
            stable.failure_rate(),
            rule.failure_margin,
        ),
        ("dead-lettered", canary.dead_letter_rate(), stable.dead_letter_rate(), rule.dead_letter_margin),
    )
    for what, ours, theirs, margin in checks:
        if ours - theirs > margin:
            return (
                f"canary {canary.release}: {ours:.0%} of {canary.workflows} workflows {what}, "
                f"stable {stable.release}: {theirs:.0%} of {stable.workflows}; the rule allows "
                f"{margin:.0%} more"
            )
    return None


@dataclass
class ReleaseStatus:
    """One release of a service, side by side with the others in ``chorus rollout status``."""

    release: str
    role: str = "idle"
    running: bool = False
    replicas: int = 0
    workflows: int = 0
    in_flight: int = 0
    ended: int = 0
    completed: int = 0
    failed: int = 0
    dead_lettered: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "release": self.release,
            "role": self.role,
            "running": self.running,
            "replicas": self.replicas,
            "workflows": self.workflows,
            "in_flight": self.in_flight,
            "ended": self.ended,
            "completed": self.completed,
            "completion_rate": round(self.completed / self.ended, 4) if self.ended else None,
            "failed": self.failed,
            "failure_rate": round(self.failed / self.workflows, 4) if self.workflows else None,
            "dead_lettered": self.dead_lettered,
            "failures_by_category": dict(sorted(self.failures.items())),
            "steps": self.steps,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
        }


def role_of(release: str, policy: RolloutChanged | None, in_flight: int) -> str:
    """``stable`` / ``canary`` as the policy says; otherwise ``draining`` while workflows
    pinned to it are still running, else ``idle`` (safe to remove)."""
    if policy is not None and release == policy.stable:
        return "stable"
    if policy is not None and policy.status == "canary" and release == policy.canary:
        return "canary"
    return "draining" if in_flight else "idle"
