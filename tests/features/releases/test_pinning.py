"""Versioned rollouts without I/O: pinning new workflows, who owns an event, policy changes,
the automatic-rollback rule, and what a release reports."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from chorus.contracts.rollouts import AutoRollback, RolloutChanged
from chorus.kernel.store import StateRow
from chorus.platform.rollout_service.domain import (
    Change,
    ChangeRefused,
    Outcomes,
    apply_change,
    judge,
    repin_request,
)
from chorus.reference.sandbox.model import NOT_JSON, flaky_answer
from chorus.releases.pinning import Pinning, Verdict
from chorus.releases.report import ReleaseWindow, quantile
from chorus.releases.rollouts import RolloutView, canary_point, pin_for
from chorus.testing import make_event
from tests.support.events import TaskSubmitted

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def canary(percent: float = 20, **more: object) -> RolloutChanged:
    fields: dict[str, object] = {
        "service": "invoice_agent",
        "revision": 1,
        "stable": "1.0",
        "canary": "2.0",
        "percent": percent,
        "status": "canary",
        "action": "start",
        "changed_by": "ops",
        **more,
    }
    return RolloutChanged.model_validate(fields)


def test_a_canary_takes_about_its_share_of_new_workflows_the_same_way_every_time() -> None:
    policy = canary(20)
    ids = [f"wf-{i}" for i in range(10_000)]
    pins = [pin_for(policy, "procurement", w) for w in ids]
    assert 0.18 < pins.count("2.0") / len(ids) < 0.22
    assert pins == [pin_for(policy, "procurement", w) for w in ids]  # a restart pins the same
    # Independent between services: another service's canary takes other workflows.
    other = [canary_point("budget_agent", w) < 20 for w in ids]
    assert sum(a and b for a, b in zip([p == "2.0" for p in pins], other, strict=True)) < 0.06 * len(ids)


def test_only_a_running_canary_of_the_right_type_takes_workflows() -> None:
    scoped = canary(100, workflow_types=["research"])
    assert pin_for(scoped, "procurement", "wf-1") == "1.0"
    assert pin_for(scoped, "research", "wf-1") == "2.0"
    assert pin_for(canary(100, status="rolled_back"), "procurement", "wf-1") == "1.0"


def test_the_view_keeps_the_latest_revision_of_each_service() -> None:
    view = RolloutView()
    view.apply(canary(revision=2, percent=50))
    view.apply(canary(revision=1, percent=10))  # an older record read late
    assert view.policy("invoice_agent") == canary(revision=2, percent=50)
    assert view.pins("procurement", "wf-1") in ({"invoice_agent": "1.0"}, {"invoice_agent": "2.0"})
    assert view.policy("budget_agent") is None


def _event(pins: dict[str, str] | None = None) -> object:
    env = make_event(TaskSubmitted(task="t")).envelope
    return env.model_copy(update={"pins": pins})


def _row(release: str | None) -> StateRow:
    return StateRow(state=None, state_version=1, revision=0, parked_on=None, release=release)


@pytest.mark.parametrize(
    ("named", "release", "pins", "row", "policy", "verdict"),
    [
        # The checkpoint row names the owner: nothing else counts.
        (True, "2.0", {"invoice_agent": "1.0"}, "2.0", None, Verdict.MINE),
        (False, "1.0", {"invoice_agent": "1.0"}, "2.0", None, Verdict.NOT_MINE),
        # Then the envelope's pin.
        (True, "2.0", {"invoice_agent": "2.0"}, None, None, Verdict.MINE),
        (False, "1.0", {"invoice_agent": "2.0"}, None, None, Verdict.NOT_MINE),
        (False, "1.0", {"budget_agent": "2.0"}, None, None, Verdict.MINE),  # another service's pin
        # No pin, no policy: the release in the service's own group.
        (False, "1.0", None, None, None, Verdict.MINE),
        (True, "2.0", None, None, None, Verdict.NOT_MINE),
        # No pin under a policy: claimed for its stable release first.
        (True, "2.0", None, None, canary(), Verdict.CLAIM),
        (False, "1.0", None, None, canary(), Verdict.CLAIM),
    ],
)
def test_who_owns_an_event(
    named: bool,
    release: str,
    pins: dict[str, str] | None,
    row: str | None,
    policy: RolloutChanged | None,
    verdict: Verdict,
) -> None:
    view = RolloutView({"invoice_agent": policy} if policy else None)
    pinning = Pinning("invoice_agent", release, named=named, view=view)
    decision = pinning.decide(_event(pins), _row(row) if row else None)  # type: ignore[arg-type]
    assert decision.verdict is verdict
    if verdict is Verdict.CLAIM:
        assert decision.owner == "1.0"


def test_a_rollout_starts_shifts_and_promotes() -> None:
    started = apply_change("invoice_agent", None, Change("start", "ops", canary="2.0", percent=10))
    assert (started.revision, started.status, started.percent, started.stable) == (1, "canary", 10, "main")
    shifted = apply_change("invoice_agent", started, Change("set", "ops", percent=50, reason="fine so far"))
    assert (shifted.revision, shifted.percent, shifted.reason) == (2, 50, "fine so far")
    promoted = apply_change("invoice_agent", shifted, Change("promote", "ops"))
    assert (promoted.stable, promoted.canary, promoted.status, promoted.percent) == (
        "2.0",
        None,
        "promoted",
        0,
    )
    # The next rollout starts from the promoted release.
    nxt = apply_change("invoice_agent", promoted, Change("start", "ops", canary="3.0", percent=5))
    assert (nxt.stable, nxt.canary, nxt.revision) == ("2.0", "3.0", 4)
    back = apply_change("invoice_agent", nxt, Change("rollback", "ops", reason="slower"))
    assert (back.stable, back.canary, back.status) == ("2.0", "3.0", "rolled_back")


@pytest.mark.parametrize(
    ("current", "change", "status", "pointer"),
    [
        # A first rollout starts from the main release (the owner of unpinned work before).
        (None, Change("start", "ops", stable="1.0", canary="2.0", percent=10), 422, "/stable"),
        (None, Change("start", "ops", percent=10), 422, "/canary"),
        (None, Change("start", "ops", canary="main", percent=10), 422, "/canary"),
        (None, Change("promote", "ops"), 404, None),
        (canary(), Change("start", "ops", canary="3.0", percent=10), 409, None),
        (canary(status="promoted"), Change("set", "ops", percent=10), 409, None),
        (canary(status="rolled_back"), Change("promote", "ops"), 409, None),
        (canary(), Change("set", "ops"), 422, "/percent"),
        (canary(), Change("set", "ops", percent=101), 422, "/percent"),
    ],
)
def test_a_change_that_does_not_apply_says_why(
    current: RolloutChanged | None, change: Change, status: int, pointer: str | None
) -> None:
    with pytest.raises(ChangeRefused) as refused:
        apply_change("invoice_agent", current, change)
    assert (refused.value.status, refused.value.pointer) == (status, pointer)


def test_an_operator_moves_a_workflow_between_the_releases_of_the_rollout() -> None:
    asked = repin_request(
        "invoice_agent", canary(status="rolled_back"), "2.0", None, "1.0", "ops", "removing 2.0"
    )
    assert (asked.from_release, asked.to_release, asked.requested_by, asked.reason) == (
        "2.0",
        "1.0",
        "ops",
        "removing 2.0",
    )


@pytest.mark.parametrize(
    ("policy", "pinned_to", "ended", "to", "status", "pointer"),
    [
        (None, "2.0", None, "1.0", 409, None),  # no rollout: one release, nothing to move to
        (canary(), "2.0", "completed", "1.0", 409, None),  # ended: nothing in flight
        (canary(), "2.0", None, "9.9", 422, "/to"),  # not a release of this rollout
        (canary(), "2.0", None, "2.0", 409, None),  # there already
        (canary(status="rolled_back"), "1.0", None, "2.0", 422, "/to"),  # the release being removed
    ],
)
def test_a_move_that_cannot_apply_says_why(
    policy: RolloutChanged | None,
    pinned_to: str,
    ended: str | None,
    to: str,
    status: int,
    pointer: str | None,
) -> None:
    with pytest.raises(ChangeRefused) as refused:
        repin_request("invoice_agent", policy, pinned_to, ended, to, "ops", "why")
    assert (refused.value.status, refused.value.pointer) == (status, pointer)


def test_the_rule_rolls_back_a_canary_that_fails_more_than_stable_by_the_margin() -> None:
    guarded = canary(
        auto_rollback=AutoRollback(failure_margin=0.1, dead_letter_margin=0.05, min_workflows=20)
    )
    stable = Outcomes("1.0", workflows=100, failed=5, dead_lettered=1)
    assert judge(guarded, stable, Outcomes("2.0", workflows=19, failed=19)) is None  # too few yet
    assert judge(guarded, stable, Outcomes("2.0", workflows=20, failed=3)) is None  # 15% vs 5%: within
    why = judge(guarded, stable, Outcomes("2.0", workflows=20, failed=4))
    assert why is not None and "20% of 20 workflows failed" in why and "stable 1.0: 5% of 100" in why
    why = judge(guarded, stable, Outcomes("2.0", workflows=20, failed=1, dead_lettered=2))
    assert why is not None and "dead-lettered" in why
    assert judge(canary(), stable, Outcomes("2.0", workflows=20, failed=20)) is None  # no rule
    assert judge(guarded.model_copy(update={"status": "promoted"}), stable, Outcomes("2.0", 20, 20)) is None


def test_a_release_window_reports_its_steps_and_their_quantiles() -> None:
    window = ReleaseWindow(NOW, random.Random(7))
    for ms in range(1, 101):
        window.step(ms / 1000)
    window.skipped()
    report = window.report("invoice_agent", "2.0", "invoice_agent.2.0", "pod-1", NOW)
    assert (report.steps, report.not_mine, report.release) == (100, 1, "2.0")
    assert report.p50_ms == pytest.approx(50.5) and report.p99_ms == pytest.approx(99.01)
    assert quantile([1.0], 0.99) == 1.0
    assert ReleaseWindow(NOW).idle
    assert ReleaseWindow(NOW).report("s", "main", "s", "i", NOW + timedelta(seconds=30)).p50_ms is None


def test_the_flaky_sandbox_model_fails_the_same_documents_whatever_the_feedback() -> None:
    from chorus.outside.llm import ChatMessage
    from chorus.outside.llm.client import reprompt

    def prompt(doc: str, feedback: list[str]) -> list[ChatMessage]:
        return reprompt("task: extract_invoice", f"<<<INVOICE\n{doc}\nINVOICE>>>", feedback)

    docs = [f"INVOICE {uuid.uuid4()}" for _ in range(2000)]
    failing = [d for d in docs if flaky_answer("flaky-30", prompt(d, [])) == NOT_JSON]
    assert 0.25 < len(failing) / len(docs) < 0.35
    assert all(flaky_answer("flaky-30", prompt(d, ["/: not JSON"])) == NOT_JSON for d in failing)
    assert flaky_answer("gpt-4o-mini", prompt(failing[0], [])) is None
