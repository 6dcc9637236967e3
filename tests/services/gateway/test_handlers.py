"""The gateway's handlers: telling the submitter how its workflow ended (a signed
callback, once), ending a workflow that outlived its deadline, and cancelling one.
The API that starts workflows is tested over HTTP (tests/services/gateway/test_api.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest

from chorus.base.errors import TransientError
from chorus.contracts.lifecycle import (
    WorkflowCancelRequested,
    WorkflowDeadlineReached,
    WorkflowEnded,
    WorkflowStarted,
)
from chorus.outside.dependencies import Dependency
from chorus.platform.gateway.adapters.webhooks import WebhookSender
from chorus.platform.gateway.domain import GatewayState, webhook_signature
from chorus.platform.gateway.service import SPEC
from chorus.testing import Unguarded, WorkflowHarness

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# Loopback is an allowed egress in tests (tests/conftest.py); the transport below answers.
CALLBACK = "http://127.0.0.1:8/chorus/done"
COMPLETED = WorkflowEnded(outcome="completed", result={"payment_id": "pay-1"}, ended_by="payment_agent")


def started(callback_url: str | None = CALLBACK) -> WorkflowStarted:
    return WorkflowStarted(submitted_by="sam", start_event_type="invoice.received", callback_url=callback_url)


class Receiver:
    """The submitter's callback endpoint: records each request, answers ``statuses`` in turn
    (then 204)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.statuses: list[int] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(self.statuses.pop(0) if self.statuses else 204)


@pytest.fixture
def receiver() -> Receiver:
    return Receiver()


@pytest.fixture
async def gateway(receiver: Receiver) -> AsyncIterator[WorkflowHarness]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(receiver)) as client:
        sender = WebhookSender(client, SECRET, 5.0, guards=Unguarded(), receivers=Dependency(name="webhooks"))
        yield WorkflowHarness(SPEC, sender)


async def test_the_submitter_is_told_how_its_workflow_ended_once_in_a_signed_callback(
    gateway: WorkflowHarness, receiver: Receiver
) -> None:
    await gateway.deliver(started(), "wf-1", workflow_type="procurement")
    await gateway.deliver(started("http://127.0.0.1:8/other"), "wf-1")  # a copy of the start changes nothing
    gateway.clock.advance(3600)
    end = await gateway.deliver(COMPLETED, "wf-1", workflow_type="procurement")
    [told] = receiver.requests
    assert str(told.url) == CALLBACK
    assert json.loads(told.content) == {
        "workflow_id": "wf-1",
        "workflow_type": "procurement",
        "outcome": "completed",
        "reason": "",
        "result": {"payment_id": "pay-1"},
        "ended_at": end.event.envelope.occurred_at.isoformat(),
    }
    delivery_id, timestamp = told.headers["webhook-id"], told.headers["webhook-timestamp"]
    assert delivery_id == str(end.event.envelope.event_id)  # receivers dedupe on it
    assert timestamp == str(int(gateway.clock.now().timestamp()))
    assert told.headers["webhook-signature"] == webhook_signature(
        [SECRET], delivery_id, timestamp, told.content
    )
    assert gateway.state("wf-1") == GatewayState(callback_url=CALLBACK, ended=True, outcome="completed")
    await gateway.deliver(COMPLETED, "wf-1")  # the end again (redelivered): told already
    assert len(receiver.requests) == 1


async def test_a_receiver_that_fails_is_called_again_with_the_same_delivery_id(
    gateway: WorkflowHarness, receiver: Receiver
) -> None:
    await gateway.deliver(started(), "wf-1")
    receiver.statuses = [503]
    end = gateway.event(COMPLETED, "wf-1")
    with pytest.raises(TransientError):  # the runtime retries it with durable backoff
        await gateway.deliver(end)
    assert gateway.state("wf-1").ended is False  # not told yet
    await gateway.deliver(end, attempt=2)
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == str(end.envelope.event_id)
    assert gateway.state("wf-1").ended is True


async def test_without_a_callback_or_a_start_here_nobody_is_called(
    gateway: WorkflowHarness, receiver: Receiver
) -> None:
    await gateway.deliver(started(callback_url=None), "wf-1")
    await gateway.deliver(COMPLETED, "wf-1")
    assert gateway.state("wf-1") == GatewayState(ended=True, outcome="completed")
    await gateway.deliver(COMPLETED, "wf-elsewhere")  # started by someone else: not the gateway's to tell
    assert gateway.state("wf-elsewhere") is None
    assert receiver.requests == []


async def test_a_workflow_still_running_at_its_deadline_ends_timed_out(gateway: WorkflowHarness) -> None:
    await gateway.deliver(started(), "wf-1")
    deadline_at = gateway.clock.now() + timedelta(days=2)
    step = await gateway.deliver(WorkflowDeadlineReached(deadline_at=deadline_at), "wf-1")
    ended = step.first(WorkflowEnded)
    assert (ended.outcome, ended.ended_by, step.outcome.ended) == ("timed_out", "gateway", "timed_out")
    assert deadline_at.isoformat() in ended.reason


async def test_a_cancel_ends_a_running_workflow_saying_who_and_why_in_the_reason_only(
    gateway: WorkflowHarness,
) -> None:
    await gateway.deliver(started(), "wf-1")
    asked = WorkflowCancelRequested(requested_by="sam", reason="submitted twice")
    step = await gateway.deliver(asked, "wf-1")
    ended = step.first(WorkflowEnded)
    assert (ended.outcome, ended.ended_by, step.outcome.ended) == ("cancelled", "gateway", "cancelled")
    assert ended.reason == "cancelled by sam: submitted twice"  # personal: sealed on the way out
    assert ended.result == {"cancelled": True}


async def test_a_workflow_that_ended_is_neither_timed_out_nor_cancelled(gateway: WorkflowHarness) -> None:
    await gateway.deliver(started(), "wf-1")
    await gateway.deliver(COMPLETED, "wf-1")
    late = [
        WorkflowDeadlineReached(deadline_at=gateway.clock.now()),
        WorkflowCancelRequested(requested_by="sam", reason="too late"),
    ]
    for event in late:
        step = await gateway.deliver(event, "wf-1")
        assert (step.emitted, step.outcome.ended) == ([], None)
