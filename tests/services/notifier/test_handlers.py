"""The notifier: who is told what, and which unsent messages become moot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest

from chorus.contracts.approvals import ApprovalEscalated, ApprovalRouted, EscalationStep
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.platform.notifier.adapters.channels import Channels
from chorus.platform.notifier.adapters.deliveries import PlanDeliveries, SupersedeDeliveries
from chorus.platform.notifier.bootstrap import Deps
from chorus.platform.notifier.config import Settings
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
