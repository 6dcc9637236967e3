"""The notifier: who is told what, and which unsent messages become moot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest

from chorus.contracts.approvals import ApprovalEscalated, ApprovalRouted, EscalationStep
from chorus.contracts.lifecycle import WorkflowEnded, WorkflowStarted
from chorus.platform.notifier.adapters.channels import Channels
from chorus.platform.notifier.adapters.deliveries import PlanDeliveries, SupersedeDeliveries
from chorus.platform.notifier.bootstrap import Deps
from chorus.platform.notifier.config import Settings, Submitter
from chorus.platform.notifier.delivery import link_for
from chorus.platform.notifier.domain import Channel, NoticeKind, Recipient, message_text, webhook_body
from chorus.platform.notifier.service import SPEC
from chorus.testing import WorkflowHarness
from chorus.web.links import LinkCheck, check_link
from tests.support.events import approval_decided

CHAIN = [EscalationStep(tier="manager", window_s=8 * 3600), EscalationStep(tier="director", window_s=3600)]
ROUTED = ApprovalRouted(approval_id="appr-1", chain=CHAIN, fallback="auto_reject", policy_version=0)
REVIEWERS = {"dana.manager": "manager", "mo.manager": "manager", "erin.director": "director"}


@pytest.fixture
async def notifier() -> AsyncIterator[WorkflowHarness]:
    async with httpx.AsyncClient() as http:
        channels = Channels(Settings(), http)
        yield WorkflowHarness(SPEC, Deps(channels, REVIEWERS, {"manager": "https://hooks.example/m"}))


async def test_a_routed_approval_tells_every_reviewer_of_the_first_tier_and_its_channel(
    notifier: WorkflowHarness,
) -> None:
    step = await notifier.deliver(ROUTED, "wf-1", workflow_type="procurement")
    [plan] = step.outcome.effects
    assert isinstance(plan, PlanDeliveries)
    assert plan.recipients == [
        Recipient(Channel.EMAIL, "dana.manager"),
        Recipient(Channel.EMAIL, "mo.manager"),
        Recipient(Channel.WEBHOOK, "tier:manager"),
    ]
    assert plan.notice.kind is NoticeKind.WAITING and plan.notice.tier == "manager"
    assert plan.notice.waiting_until == step.event.envelope.occurred_at + timedelta(hours=8)


async def test_escalation_makes_the_last_tiers_unsent_messages_moot_and_tells_the_next(
    notifier: WorkflowHarness,
) -> None:
    await notifier.deliver(ROUTED, "wf-1")
    until = notifier.clock.now() + timedelta(hours=9)
    escalated = ApprovalEscalated(
        approval_id="appr-1", level=1, from_tier="manager", to_tier="director", waiting_until=until
    )
    moot, plan = (await notifier.deliver(escalated, "wf-1")).outcome.effects
    assert isinstance(moot, SupersedeDeliveries) and moot.approval_id == "appr-1"
    assert isinstance(plan, PlanDeliveries)
    assert plan.recipients == [Recipient(Channel.EMAIL, "erin.director")]  # no channel for directors
    assert (plan.notice.kind, plan.notice.level, plan.notice.waiting_until) == (
        NoticeKind.ESCALATED,
        1,
        until,
    )


async def test_an_end_with_an_open_approval_tells_its_tier_and_a_decided_one_tells_nobody(
    notifier: WorkflowHarness,
) -> None:
    await notifier.deliver(ROUTED, "wf-1")
    ended = WorkflowEnded(outcome="cancelled", ended_by="gateway")
    moot, withdrawn = (await notifier.deliver(ended, "wf-1")).outcome.effects
    assert isinstance(moot, SupersedeDeliveries) and moot.approval_id is None
    assert isinstance(withdrawn, PlanDeliveries) and withdrawn.notice.kind is NoticeKind.WITHDRAWN
    assert "ended (cancelled)" in message_text(withdrawn.notice, None)

    await notifier.deliver(ROUTED, "wf-2")
    decided = approval_decided(requested_by="x")
    [moot] = (await notifier.deliver(decided, "wf-2")).outcome.effects
    assert isinstance(moot, SupersedeDeliveries)
    assert (await notifier.deliver(ended, "wf-2")).outcome.effects[1:] == []


async def test_messages_link_to_the_approval_signed_until_the_window_ends(notifier: WorkflowHarness) -> None:
    [plan] = (await notifier.deliver(ROUTED, "wf-1")).outcome.effects
    assert isinstance(plan, PlanDeliveries)
    settings = Settings(console_url="https://console.example")
    link = link_for(settings, plan.notice, "dana.manager", notifier.clock.now())
    assert link is not None and link.startswith("https://console.example/approvals/appr-1?")
    query = dict(part.split("=", 1) for part in link.split("?", 1)[1].split("&"))
    key = settings.link_key.get_secret_value()
    now = notifier.clock.now()
    assert (
        check_link(key, "/approvals/appr-1", "dana.manager", query["exp"], query["sig"], now)
        is LinkCheck.VALID
    )
    assert (
        check_link(key, "/approvals/appr-2", "dana.manager", query["exp"], query["sig"], now)
        is LinkCheck.FORGED
    )
    assert (
        check_link(key, "/approvals/appr-1", "mo.manager", query["exp"], query["sig"], now)
        is LinkCheck.FORGED
    )
    later = now + timedelta(hours=8, seconds=1)
    assert (
        check_link(key, "/approvals/appr-1", "dana.manager", query["exp"], query["sig"], later)
        is LinkCheck.EXPIRED
    )
    body = webhook_body(plan.notice, link)
    assert body["blocks"][-1]["elements"][0]["url"] == link  # type: ignore[index]
    # Nothing of the workflow's subject: ids, tier and window only.
    assert "wf-1" in body["text"] and "appr-1" in body["text"]  # type: ignore[operator]


SUBMITTERS = {
    "pat.buyer": Submitter(email="pat@corp.example", webhook="https://hooks.example/pat"),
    "kim.buyer": Submitter(email="kim@corp.example", when_waiting=True),
}


@pytest.fixture
async def with_submitters() -> AsyncIterator[WorkflowHarness]:
    async with httpx.AsyncClient() as http:
        channels = Channels(Settings(), http)
        yield WorkflowHarness(SPEC, Deps(channels, REVIEWERS, {}, SUBMITTERS))


def started_by(principal: str) -> WorkflowStarted:
    return WorkflowStarted(submitted_by=principal, start_event_type="invoice.received")


async def test_the_submitter_hears_how_their_workflow_ended_on_each_of_their_channels(
    with_submitters: WorkflowHarness,
) -> None:
    await with_submitters.deliver(started_by("pat.buyer"), "wf-1", workflow_type="procurement")
    ended = WorkflowEnded(outcome="compensated", ended_by="budget_agent")
    moot, told = (await with_submitters.deliver(ended, "wf-1", workflow_type="procurement")).outcome.effects
    assert isinstance(moot, SupersedeDeliveries)  # first: the told message is not superseded
    assert isinstance(told, PlanDeliveries)
    assert told.recipients == [
        Recipient(Channel.EMAIL, "submitter:pat.buyer"),
        Recipient(Channel.WEBHOOK, "submitter:pat.buyer"),
    ]
    assert (told.notice.kind, told.notice.outcome) == (NoticeKind.SUBMISSION_ENDED, "compensated")
    now = with_submitters.clock.now()
    link = link_for(Settings(console_url="https://console.example/"), told.notice, "submitter:pat.buyer", now)
    assert link == "https://console.example/workflows/wf-1"
    text = message_text(told.notice, link)
    assert "Your procurement workflow wf-1 ended: compensated." in text and link in text
    assert webhook_body(told.notice, link)["blocks"][-1]["elements"][0]["url"] == link  # type: ignore[index]


async def test_someone_the_directory_cannot_reach_is_not_remembered_nor_told(
    with_submitters: WorkflowHarness,
) -> None:
    step = await with_submitters.deliver(started_by("someone.else"), "wf-1")
    assert step.outcome.state is None  # no name kept that nobody will be told about
    ended = WorkflowEnded(outcome="completed", ended_by="payment_agent")
    [moot] = (await with_submitters.deliver(ended, "wf-1")).outcome.effects
    assert isinstance(moot, SupersedeDeliveries)


async def test_only_a_submitter_who_opted_in_hears_that_their_workflow_waits_for_a_person(
    with_submitters: WorkflowHarness,
) -> None:
    await with_submitters.deliver(started_by("pat.buyer"), "wf-1")
    [reviewers] = (await with_submitters.deliver(ROUTED, "wf-1")).outcome.effects
    assert isinstance(reviewers, PlanDeliveries) and reviewers.notice.kind is NoticeKind.WAITING

    await with_submitters.deliver(started_by("kim.buyer"), "wf-2", workflow_type="procurement")
    reviewers, told = (
        await with_submitters.deliver(ROUTED, "wf-2", workflow_type="procurement")
    ).outcome.effects
    assert isinstance(told, PlanDeliveries)
    assert told.recipients == [Recipient(Channel.EMAIL, "submitter:kim.buyer")]
    assert (told.notice.kind, told.notice.approval_id, told.notice.tier) == (
        NoticeKind.SUBMISSION_WAITING,
        "appr-1",
        "manager",
    )
    assert "waits for a person: approval appr-1 is with the manager tier" in message_text(told.notice, None)


def test_a_submitter_needs_a_way_to_be_reached() -> None:
    with pytest.raises(ValueError, match="needs an email or a webhook"):
        Submitter()
