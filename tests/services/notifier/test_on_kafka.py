"""The notifier on real Kafka and PostgreSQL: reviewers of the tier get an e-mail (a real
SMTP server: the sandbox's aiosmtpd) and their channel a Slack-compatible webhook, each with
a signed link; a channel that is down is retried durably, every attempt recorded, and holds
no other message back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from aiohttp import web

from chorus.contracts.approvals import ApprovalEscalated, ApprovalRouted, EscalationStep
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.lifecycle import WorkflowEnded, WorkflowStarted
from chorus.platform.notifier.adapters.channels import Channels, DeliveryError
from chorus.platform.notifier.config import Reviewer, Settings, Submitter
from chorus.platform.notifier.service import SPEC
from chorus.reference.sandbox.app import SandboxConfig, create_app
from chorus.runtime.runner import ServiceRunner, running
from chorus.tools.devstack import free_ports
from chorus.web.apikeys import bearer
from chorus.web.links import LinkCheck, check_link
from tests.support.events import approval_decided
from tests.support.kafka import (
    envelope,
    events_of,
    local_verifier,
    publish,
    read_to_end,
    read_topic,
    stated_by,
)
from tests.support.onkafka import in_process
from tests.support.registry import isolated_registry
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

OPERATOR = bearer("demo-operator-key")
LINK_KEY = "notifier-test-link-key"
CHAIN = [EscalationStep(tier="manager", window_s=8 * 3600), EscalationStep(tier="director", window_s=3600)]


class Outside:
    """The sandbox (SMTP server and Slack channels) as the notifier sees it."""

    def __init__(self, url: str, smtp_port: int) -> None:
        self.url = url
        self.smtp_port = smtp_port

    async def stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient() as client:
            body: dict[str, Any] = (await client.get(f"{self.url}/stats")).json()
            return body

    async def mail_about(self, workflow_id: str) -> list[dict[str, Any]]:
        return [m for m in (await self.stats())["mail"] if workflow_id in m["subject"]]

    async def slack_about(self, workflow_id: str) -> list[dict[str, Any]]:
        return [m for m in (await self.stats())["slack"] if workflow_id in m["body"]["text"]]


@pytest.fixture(scope="module")
async def outside() -> AsyncIterator[Outside]:
    smtp_port, port = free_ports(2)
    runner = web.AppRunner(create_app(SandboxConfig(smtp_port=smtp_port)))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield Outside(f"http://127.0.0.1:{port}", smtp_port)
    finally:
        await runner.cleanup()


@pytest.fixture
async def notifier(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str, outside: Outside
) -> AsyncIterator[tuple[ServiceRunner, Any]]:
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    settings = Settings(
        **in_process(kafka_bootstrap, database_url),
        group_id=f"notifier-{unique}",
        smtp_host="127.0.0.1",
        smtp_port=outside.smtp_port,
        smtp_starttls=False,  # the sandbox's sink, on loopback
        reviewers={
            "dana.manager": Reviewer(tier="manager", email="dana@corp.example"),
            "mo.manager": Reviewer(tier="manager", email="mo@corp.example"),
            "erin.director": Reviewer(tier="director", email="erin@corp.example"),
            "nadia.manager": Reviewer(tier="manager"),  # no address: not mailed
        },
        submitters={
            "pat.buyer": Submitter(email="pat@corp.example", webhook=f"{outside.url}/slack/buyers"),
            # Their channel is down: only their mail reaches them.
            "sam.buyer": Submitter(email="sam@corp.example", webhook="http://127.0.0.1:9/hooks/sam"),
        },
        tier_webhooks={
            "manager": f"{outside.url}/slack/managers",
            "director": "http://127.0.0.1:9/hooks/directors",  # nothing listens: always down
        },
        console_url="https://console.example",
        link_key=LINK_KEY,
        delivery_attempts=3,
        delivery_backoff_base_s=0.2,
        delivery_backoff_cap_s=0.5,
    )
    async with AsyncExitStack() as stack:
        runner = await stack.enter_async_context(running(SPEC, settings, registry=registry))
        yield runner, registry


async def test_by_default_no_mail_and_no_password_go_to_a_server_without_starttls(
    outside: Outside, unique: str
) -> None:
    settings = Settings(
        smtp_host="127.0.0.1", smtp_port=outside.smtp_port, smtp_username="notifier", smtp_password="s3cret"
    )
    async with httpx.AsyncClient() as http:
        with pytest.raises(DeliveryError, match="STARTTLS"):
            await Channels(settings, http).email("dana@corp.example", f"about {unique}", "text", unique)
    assert [m for m in (await outside.stats())["mail"] if unique in m["subject"]] == []


def from_gate(event: Any, workflow_id: str) -> Envelope:
    made = envelope(event, workflow_id=workflow_id, workflow_type="procurement")
    return made.model_copy(update={"producer": ProducerRef(service="approval_gate", version="0.1.0")})


async def notifications(runner: ServiceRunner, workflow_id: str) -> list[dict[str, Any]]:
    assert runner.http is not None
    async with httpx.AsyncClient() as client:
        answer = await client.get(
            f"http://127.0.0.1:{runner.http.port}/v1/notifications",
            params={"workflow_id": workflow_id},
            headers=OPERATOR,
        )
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["notifications"]
    return found


async def test_each_reviewer_of_the_tier_is_mailed_and_its_channel_posted_a_signed_link(
    notifier: tuple[ServiceRunner, Any], outside: Outside, unique: str
) -> None:
    runner, registry = notifier
    workflow_id = f"wf-notify-{unique}"
    routed = ApprovalRouted(
        approval_id=f"appr-{unique}", chain=CHAIN, fallback="auto_reject", policy_version=0
    )
    await publish(
        runner.settings.kafka_bootstrap,
        registry.physical_topic("approval.routed"),
        [from_gate(routed, workflow_id)],
    )

    mails = await wait_until(
        lambda: _at_least(outside.mail_about(workflow_id), 2), what="a mail to each manager with an address"
    )
    assert sorted(m["to"][0] for m in mails) == ["dana@corp.example", "mo@corp.example"]
    [posted] = await wait_until(
        lambda: _at_least(outside.slack_about(workflow_id), 1), what="the channel post"
    )
    assert posted["channel"] == "managers"

    now = datetime.now(timezone.utc)
    for mail in mails:
        link = next(word for word in mail["text"].split() if word.startswith("https://console.example/"))
        parts = urlsplit(link)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        assert parts.path == f"/approvals/appr-{unique}"
        recipient = query["to"]
        assert mail["to"][0].split("@")[0] == recipient.split(".")[0]
        assert check_link(LINK_KEY, parts.path, recipient, query["exp"], query["sig"], now) is LinkCheck.VALID
        # It holds until the manager's window ends, not longer.
        assert (
            timedelta(hours=7, minutes=59)
            < datetime.fromtimestamp(int(query["exp"]), timezone.utc) - now
            <= timedelta(hours=8)
        )
        assert "Approval needed" in mail["subject"] and "manager tier" in mail["text"]
    button = posted["body"]["blocks"][-1]["elements"][0]["url"]
    assert "to=tier%3Amanager" in button or "to=tier:manager" in button

    sent = await notifications(runner, workflow_id)
    assert {(n["channel"], n["recipient"], n["status"]) for n in sent} == {
        ("email", "dana.manager", "delivered"),
        ("email", "mo.manager", "delivered"),
        ("webhook", "tier:manager", "delivered"),
    }
    assert all(len(n["attempt_log"]) == 1 and n["attempt_log"][0]["ok"] for n in sent)


async def test_a_channel_that_is_down_is_retried_recorded_and_given_up_without_holding_the_mail(
    notifier: tuple[ServiceRunner, Any], outside: Outside, unique: str
) -> None:
    runner, registry = notifier
    workflow_id = f"wf-escalate-{unique}"
    topic = registry.physical_topic("approval.routed")
    routed = ApprovalRouted(
        approval_id=f"appr-{unique}", chain=CHAIN, fallback="auto_reject", policy_version=0
    )
    until = datetime.now(timezone.utc) + timedelta(hours=1)
    escalated = ApprovalEscalated(
        approval_id=f"appr-{unique}", level=1, from_tier="manager", to_tier="director", waiting_until=until
    )
    await publish(
        runner.settings.kafka_bootstrap,
        topic,
        [from_gate(routed, workflow_id), from_gate(escalated, workflow_id)],
    )
    [mail] = await wait_until(
        lambda: _to(outside.mail_about(workflow_id), "erin@corp.example"), what="the director's mail"
    )
    assert "Escalated to you" in mail["subject"] and "director tier (step 2)" in mail["text"]

    async def given_up() -> list[dict[str, Any]] | None:
        found = [n for n in await notifications(runner, workflow_id) if n["recipient"] == "tier:director"]
        return found if found and found[0]["status"] == "given_up" else None

    [hook] = await wait_until(given_up, what="the directors' channel given up after its attempts")
    assert [a["attempt"] for a in hook["attempt_log"]] == [1, 2, 3]
    assert all(not a["ok"] and "webhook" in a["error"] for a in hook["attempt_log"])
    assert hook["last_error"] == hook["attempt_log"][-1]["error"]

    # The decision ends it: nothing more is sent about it; a later end tells nobody.
    decided = approval_decided(approval_id=f"appr-{unique}", decided_by="erin.director", tier="director")
    ended = WorkflowEnded(outcome="completed", ended_by="payment_agent")
    await publish(runner.settings.kafka_bootstrap, topic, [from_gate(decided, workflow_id)])
    await publish(
        runner.settings.kafka_bootstrap,
        registry.physical_topic("workflow.ended"),
        [stated_by(envelope(ended, workflow_id=workflow_id), "payment_agent")],
    )
    other = f"wf-withdrawn-{unique}"
    await publish(runner.settings.kafka_bootstrap, topic, [from_gate(routed, other)])
    await wait_until(lambda: _at_least(outside.mail_about(other), 2), what="the managers told of the other")
    cancelled = WorkflowEnded(outcome="cancelled", ended_by="gateway")
    await publish(
        runner.settings.kafka_bootstrap,
        registry.physical_topic("workflow.ended"),
        [stated_by(envelope(cancelled, workflow_id=other), "gateway")],
    )
    withdrawn = await wait_until(
        lambda: _subject(outside.mail_about(other), "No longer needed", 2),
        what="the managers told it is withdrawn",
    )
    assert all("ended (cancelled)" in m["text"] and "https://" not in m["text"] for m in withdrawn)
    kinds = [n["kind"] for n in await notifications(runner, workflow_id)]
    assert "withdrawn" not in kinds  # decided before it ended


async def test_the_submitter_gets_one_message_per_ended_workflow_on_each_of_their_channels(
    notifier: tuple[ServiceRunner, Any], outside: Outside, unique: str
) -> None:
    """Three procurements pat.buyer submitted end three ways: pat's mailbox gets one mail
    for each, with the outcome and the workflow's page, and so does pat's channel; each
    message that reached pat is stated, signed by the notifier, as ``submitter.notified``.
    Nobody is told of a workflow whose submitter the directory cannot reach, and a channel
    that never took its message is never said to have."""
    runner, registry = notifier
    bootstrap, lifecycle = runner.settings.kafka_bootstrap, registry.physical_topic("workflow.started")
    ends = {"completed": "payment_agent", "rejected": "invoice_agent", "compensated": "budget_agent"}
    ids = {outcome: f"wf-{outcome}-{unique}" for outcome in ends}
    stranger, sams = f"wf-stranger-{unique}", f"wf-sam-{unique}"

    def started(workflow_id: str, by: str) -> Envelope:
        event = WorkflowStarted(submitted_by=by, start_event_type="invoice.received")
        made = envelope(event, workflow_id=workflow_id, workflow_type="procurement")
        return stated_by(made, "gateway")

    def ended(workflow_id: str, outcome: str) -> Envelope:
        event = WorkflowEnded(outcome=outcome, ended_by=ends[outcome])  # type: ignore[arg-type]
        made = envelope(event, workflow_id=workflow_id, workflow_type="procurement")
        return stated_by(made, ends[outcome])

    await publish(bootstrap, lifecycle, [started(wf, "pat.buyer") for wf in ids.values()])
    await publish(bootstrap, lifecycle, [started(stranger, "someone.else"), started(sams, "sam.buyer")])
    for outcome, wf in ids.items():
        await publish(bootstrap, lifecycle, [ended(wf, outcome)])
    await publish(bootstrap, lifecycle, [ended(stranger, "completed"), ended(sams, "completed")])

    for outcome, wf in ids.items():
        [mail] = await wait_until(partial(_one_of, outside.mail_about, wf), what=f"pat told of {wf}")
        assert mail["to"] == ["pat@corp.example"]
        assert f"Ended ({outcome})" in mail["subject"]
        assert f"ended: {outcome}." in mail["text"]
        assert f"https://console.example/workflows/{wf}" in mail["text"]
        [post] = await wait_until(partial(_one_of, outside.slack_about, wf), what=f"pat's channel of {wf}")
        assert post["channel"] == "buyers"
        # The outbox marks a message delivered only once the channel's answer is back, which
        # may be just after the mailbox or the channel shows it.
        sent = await wait_until(
            partial(notifications, runner, wf),
            until=lambda ns: ns and all(n["status"] != "pending" for n in ns),
            what=f"pat's messages of {wf} settled",
        )
        assert {(n["channel"], n["recipient"], n["status"]) for n in sent} == {
            ("email", "submitter:pat.buyer", "delivered"),
            ("webhook", "submitter:pat.buyer", "delivered"),
        }
    # One each, not one per delivery attempt or per replay; and the stranger's end told nobody.
    assert [len(await outside.mail_about(wf)) for wf in ids.values()] == [1, 1, 1]
    assert await outside.mail_about(stranger) == [] and await notifications(runner, stranger) == []

    async def sam_given_up() -> bool:
        return any(n["status"] == "given_up" for n in await notifications(runner, sams))

    await wait_until(sam_given_up, what="sam's channel given up after its attempts")
    # What was said: one submitter.notified per message a channel took, and only those.
    await read_topic(bootstrap, [lifecycle], until=lambda rs: len(events_of(rs, "submitter.notified")) >= 7)
    told = [r for r in await read_to_end(bootstrap, lifecycle) if events_of([r], "submitter.notified")]
    by_workflow: dict[str, list[dict[str, Any]]] = {}
    for record in told:
        [body] = events_of([record], "submitter.notified")
        stated = Envelope.model_validate(body)
        local_verifier(registry).check(stated, record.value, record.headers)  # the notifier's own
        assert stated.producer.service == "notifier"
        by_workflow.setdefault(stated.workflow_id, []).append(body["payload"])
    for outcome, wf in ids.items():
        delivered = {n["delivery_id"]: n for n in await notifications(runner, wf)}
        payloads = by_workflow.pop(wf)
        assert sorted(p["channel"] for p in payloads) == ["email", "webhook"], payloads
        for p in payloads:
            assert (p["notice"], p["outcome"], p["attempts"]) == ("ended", outcome, 1)
            assert delivered[p["delivery_id"]]["status"] == "delivered"
    [sam_told] = by_workflow.pop(sams)
    # The mail, not the channel that was down.
    assert (sam_told["channel"], sam_told["outcome"]) == ("email", "completed")
    assert by_workflow == {}  # the stranger: nobody told, nothing stated


async def _one_of(about: Any, workflow_id: str) -> list[dict[str, Any]] | None:
    return await _at_least(about(workflow_id), 1)


async def _at_least(found: Any, n: int) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = await found
    return items if len(items) >= n else None


async def _to(found: Any, address: str) -> list[dict[str, Any]] | None:
    items = [m for m in await found if address in m["to"]]
    return items or None


async def _subject(found: Any, words: str, n: int) -> list[dict[str, Any]] | None:
    items = [m for m in await found if words in m["subject"]]
    return items if len(items) >= n else None
