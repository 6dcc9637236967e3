"""Every page of the console draws the answers the APIs publish (chorus.contracts.api),
built here with those same models; an answer that does not fit its model is a 503 page
naming the field, never a server error."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

from chorus.contracts.api.audit_projector import ApprovalTask, PendingApproval, Spend, TimelineEntry
from chorus.contracts.api.deadletter_service import (
    LetterDetail,
    LetterError,
    LetterErrorDetail,
    LetterList,
    LetterSummary,
    OriginalPosition,
    OriginalRecord,
)
from chorus.contracts.api.gateway import (
    ApprovalDetail,
    ApprovalQueue,
    Me,
    OfferedSignal,
    WorkflowDetail,
    WorkflowPage,
    WorkflowSignals,
)
from chorus.contracts.api.outcome_analytics import (
    Cost,
    Durations,
    OutcomeBucket,
    Outcomes,
    ReleaseOutcomes,
    Releases,
)
from chorus.contracts.platform import Failure
from chorus.platform.console.adapters.apis import Apis
from chorus.platform.console.bootstrap import create_app
from chorus.platform.console.config import Settings
from chorus.platform.console.pages import ROUTERS
from chorus.web.webapi import MAX_PARAMETER_CHARS

NOW = datetime.now(timezone.utc).replace(microsecond=0)
OPERATOR = Me(principal="sam.operator", role="operator", tier=None)
CONTEXT = {
    "summary": "Invoice INV-7 from vendor-acme",
    "why": "over 500 EUR",
    "options": ["approve", "reject"],
}

TASK = ApprovalTask(
    workflow_id="wf-1",
    workflow_type="procurement",
    approval_id="appr-1",
    tier="manager",
    level=0,
    waiting_until=NOW + timedelta(hours=2),
    context=CONTEXT,
    stage="approval.requested",
    requested_at=NOW - timedelta(minutes=5),
)
# The approval the queue lists, as its own page shows it: the same facts, none decided yet.
APPROVAL = ApprovalDetail(
    **TASK.model_dump(exclude={"stage"}),
    status="pending",
    decision=None,
    decided_at=None,
    decided_by=None,
    submitted_decisions=[],
)
WORKFLOW = WorkflowDetail(
    workflow_id="wf-1",
    workflow_type="procurement",
    status="waiting",
    stage="approval.requested",
    waiting_for="approval",
    waiting_until=NOW + timedelta(hours=2),
    attempts=0,
    outcome=None,
    outcome_reason=None,
    result=None,
    started_at=NOW - timedelta(minutes=6),
    ended_at=None,
    duration_s=None,
    last_event_at=NOW - timedelta(minutes=5),
    events=2,
    subject_ref=None,
    pending_approval=PendingApproval(
        approval_id="appr-1", tier="manager", level=0, waiting_until=NOW + timedelta(hours=2), context=None
    ),
    spend=Spend(
        model_turns=3,
        tool_calls=2,
        input_tokens=1480,
        output_tokens=96,
        cost_micro_usd=280,
        cost_usd=0.00028,
        models=["gpt-4o-mini"],
    ),
    timeline=[
        TimelineEntry(
            event_id="e-1",
            origin="topic",
            event_type="workflow.started",
            schema_version=1,
            producer="gateway",
            producer_version="0.1.0",
            occurred_at=NOW - timedelta(minutes=6),
            recorded_at=NOW - timedelta(minutes=6),
            trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
            causation_id=None,
            decision=None,
            actor=None,
            external_call=None,
            payload={},
        )
    ],
)
SUMMARY = LetterSummary(
    id="0b0c7f4e-8a53-4b8f-9a7b-3f3f6f1f2a10",
    status="open",
    service="invoice_agent",
    service_version="0.1.0",
    consumer_group="invoice_agent",
    original_event_type=None,
    original_event_id=None,
    original_workflow_id=None,
    error=LetterError(category="poison", error_class="DecodeError", message="not an envelope"),
    original=OriginalPosition(topic="procurement.events", partition=0, offset=7),
    attempts=1,
    dead_lettered_at=NOW,
    received_at=NOW,
    resolved_at=None,
    resolved_by=None,
)
LETTER = LetterDetail(
    **{k: v for k, v in dict(SUMMARY).items() if k not in ("error", "original")},
    error=LetterErrorDetail(**dict(SUMMARY.error), traceback="Traceback ...", pointer=None),
    original=OriginalRecord(
        **dict(SUMMARY.original),
        key_b64=None,
        key=None,
        headers=[],
        timestamp_ms=None,
        value_b64="bWFya2Vy",
        value_is_json=False,
        value_json=None,
    ),
    failures=[
        Failure(at=NOW, attempt=1, error_class="DecodeError", message="not an envelope", retry_in_s=None)
    ],
    envelope=None,
    operations=[],
)
DURATIONS = Durations(count=1, p50=12.5, p90=12.5, p99=12.5)
ENDED = {"completed": 1, "timed_out": 0}
BUCKET = OutcomeBucket(
    workflow_type="procurement",
    hour=NOW.replace(minute=0, second=0),
    started=1,
    ended=ENDED,
    escalated=0,
    dead_lettered={"poison": 1},
    duration_s=DURATIONS,
    cost=Cost(completed_usd=0.00045, per_completed_usd=0.00045),
)
RELEASE = ReleaseOutcomes(
    service="invoice_agent",
    release="canary",
    workflow_type="procurement",
    started=1,
    ended=ENDED,
    completion_rate=1.0,
    escalated=0,
    dead_lettered={"poison": 0},
    duration_s=DURATIONS,
)

ANSWERS: dict[str, BaseModel] = {
    "/v1/me": OPERATOR,
    "/v1/approvals": ApprovalQueue(assignee="sam.operator", tier=None, approvals=[TASK]),
    "/v1/approvals/appr-1": APPROVAL,
    "/v1/workflows": WorkflowPage(workflows=[], next_cursor=None, next=None),
    "/v1/workflows/wf-1": WORKFLOW,
    "/v1/workflows/wf-1/signals": WorkflowSignals(
        workflow_id="wf-1",
        workflow_type="procurement",
        signals=[
            OfferedSignal(
                name="add_line",
                event_type="invoice.line_added",
                roles=["submitter"],
                update=True,
                timeout_s=30,
                description="a line of the invoice the reading missed",
                input_schema={"type": "object", "properties": {"quantity": {"type": "integer"}}},
            )
        ],
    ),
    "/v1/dead-letters": LetterList(items=[SUMMARY], count=1, limit=100),
    f"/v1/dead-letters/{SUMMARY.id}": LETTER,
    "/analytics/outcomes": Outcomes(buckets=[BUCKET]),
    "/analytics/releases": Releases(releases=[RELEASE]),
}


def apis(answers: Callable[[str], Any]) -> Apis:
    def answer(request: httpx.Request) -> httpx.Response:
        found = answers(request.url.path)
        if found is None:
            return httpx.Response(404, json={"title": "Not found", "detail": request.url.path, "status": 404})
        body = found.model_dump(mode="json") if isinstance(found, BaseModel) else found
        return httpx.Response(200, json=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return Apis(
        client, gateway="http://gw", deadletters="http://dl", analytics="http://an", notifier="http://no"
    )


@asynccontextmanager
async def signed_in(answers: Callable[[str], Any]) -> AsyncIterator[httpx.AsyncClient]:
    """The console over APIs answering ``answers(path)``, an operator signed in."""
    transport = httpx.ASGITransport(app=create_app(Settings(env="demo"), apis(answers)))
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as browser:
        form = (await browser.get("/signin")).text
        token = re.search(r'name="csrf" value="([^"]+)"', form)
        assert token, form
        await browser.post("/signin", data={"api_key": "k", "csrf": token.group(1)}, follow_redirects=False)
        yield browser


@pytest.fixture
async def console() -> AsyncIterator[httpx.AsyncClient]:
    async with signed_in(ANSWERS.get) as browser:
        yield browser


@pytest.mark.parametrize(
    ("page", "shown"),
    [
        ("/approvals", ["appr-1", "Invoice INV-7 from vendor-acme", "manager"]),
        (
            "/approvals/appr-1",
            ["Invoice INV-7 from vendor-acme", "over 500 EUR", "waiting", "workflow.started"],
        ),
        ("/workflows", ["No workflow matches"]),
        (
            "/workflows/wf-1",
            [
                "procurement",
                "approval.requested",
                "appr-1",
                "workflow.started",
                "add_line",  # a form to send it, its input filled in with what to replace
                "quantity&#34;: 0",
                # What its models used.
                "$0.000280 · 1576 tokens · 3 model turns · 2 tool calls (gpt-4o-mini)",
            ],
        ),
        ("/dead-letters", ["0b0c7f4e", "invoice_agent", "not an envelope"]),
        (f"/dead-letters/{SUMMARY.id}", ["poison", "DecodeError", "bWFya2Vy", "No one has acted on it yet"]),
        ("/outcomes", ["procurement", "canary", "100% of ended", "cost per completed ($)", "0.00045"]),
    ],
)
async def test_every_page_draws_the_published_answers(
    console: httpx.AsyncClient, page: str, shown: list[str]
) -> None:
    answer = await console.get(page)
    assert answer.status_code == 200, answer.text
    for text in shown:
        assert text in answer.text, (page, text)


async def test_an_answer_that_is_not_the_published_model_is_a_503_page_naming_the_field() -> None:
    def broken(path: str) -> Any:
        if path == "/v1/workflows/wf-1":
            return {**WORKFLOW.model_dump(mode="json"), "events": "many"}
        return ANSWERS.get(path)

    async with signed_in(broken) as browser:
        answer = await browser.get("/workflows/wf-1")
    assert answer.status_code == 503
    assert "Service unavailable" in answer.text and "/events" in answer.text


def console_parameters() -> list[tuple[str, str]]:
    """(page with every path parameter filled in, the parameter to make hostile) for every
    query and path parameter of every page the console serves."""
    found: list[tuple[str, str]] = []
    for route in (r for router in ROUTERS for r in router.routes):
        if not isinstance(route, APIRoute) or "GET" not in (route.methods or set()):
            continue
        for param in [*route.dependant.path_params, *route.dependant.query_params]:
            found.append((route.path, param.name))
    return found


@pytest.mark.parametrize(("template", "parameter"), console_parameters())
@pytest.mark.parametrize("hostile", ["a\x00b", "x" * (MAX_PARAMETER_CHARS + 1)], ids=["nul", "long"])
async def test_a_hostile_parameter_is_a_page_naming_it_and_never_reaches_an_api(
    template: str, parameter: str, hostile: str
) -> None:
    """As every API refuses them: a NUL or an over-long value in any query or path
    parameter is a 4xx page naming the parameter; the console passes nothing on."""
    asked: list[str] = []

    def answers(path: str) -> Any:
        asked.append(path)
        return ANSWERS.get(path)

    path = re.sub(
        r"\{(\w+)\}", lambda m: quote(hostile if m.group(1) == parameter else "x", safe=""), template
    )
    query = {} if "{" + parameter + "}" in template else {parameter: hostile}
    async with signed_in(answers) as browser:
        before = len(asked)
        answer = await browser.get(path, params=query)
    assert answer.status_code in (400, 422), (template, parameter, answer.status_code)
    assert parameter in answer.text
    assert not any(hostile in p or quote(hostile) in p for p in asked[before:]), asked[before:]
