"""Workflows: the filtered list (newest first, a page at a time), one workflow with its
timeline, cancelling one, and sending it a signal or update."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response

from chorus.contracts.api.audit_projector import TimelineEntry
from chorus.contracts.api.gateway import WorkflowDetail, WorkflowPage
from chorus.contracts.lifecycle import WORKFLOW_STATUSES
from chorus.contracts.search import MAX_QUERY
from chorus.platform.console.adapters.apis import ApiProblem
from chorus.platform.console.domain import skeleton, timeline, window_left
from chorus.platform.console.handlers import Console, as_utc, check_form, key_of, redirect, render, signed_in
from chorus.web.webapi import Problem

router = APIRouter()


@router.get("/workflows", response_class=HTMLResponse)
async def workflows(
    request: Request,
    c: Console,
    status: Annotated[str, Query(max_length=40)] = "",
    workflow_type: Annotated[str, Query(max_length=200)] = "",
    stage: Annotated[str, Query(max_length=200)] = "",
    submitted_by: Annotated[str, Query(max_length=200)] = "",
    started_after: Annotated[str, Query(max_length=40)] = "",
    started_before: Annotated[str, Query(max_length=40)] = "",
    q: Annotated[str, Query(max_length=255)] = "",
    query: Annotated[str, Query(max_length=MAX_QUERY)] = "",
    cursor: Annotated[str, Query(max_length=300)] = "",
) -> Response:
    session = signed_in(request)
    filters = {
        "status": status,
        "workflow_type": workflow_type,
        "stage": stage,
        "submitted_by": submitted_by,
        "started_after": as_utc(started_after),
        "started_before": as_utc(started_before),
        "q": q,
        "query": query,
    }
    params = {k: v for k, v in filters.items() if v}
    # What the form shows and the next page's link repeats: the times as typed.
    shown = {**filters, "started_after": started_after, "started_before": started_before}
    error = None
    try:
        page = await c.apis.workflows(
            key_of(session), {**params, **({"cursor": cursor} if cursor else {}), "limit": 25}
        )
    except ApiProblem as exc:
        page = WorkflowPage(workflows=[], next_cursor=None, next=None)
        error = f"{exc.title}: {exc.detail}"
    next_url = None
    if page.next_cursor:
        kept = {k: v for k, v in shown.items() if v}
        next_url = "/workflows?" + urlencode({**kept, "cursor": page.next_cursor})
    partial = bool(request.headers.get("hx-request"))
    searchable: list[str] = []
    if not partial:  # the hint under the search box: what a query may name
        try:
            found = await c.apis.search_attributes(key_of(session))
            searchable = sorted({*found.builtin, *(a for t in found.workflow_types.values() for a in t)})
        except ApiProblem:
            searchable = []
    return render(
        c,
        request,
        "_workflow_rows.html" if partial else "workflows.html",
        workflows=page.model_dump(mode="json")["workflows"],
        next_url=next_url,
        filters=shown,
        statuses=WORKFLOW_STATUSES,
        searchable=searchable,
        error=error,
    )


@router.get("/workflows/{workflow_id}", response_class=HTMLResponse)
async def workflow_page(
    request: Request,
    workflow_id: str,
    c: Console,
    sent: Annotated[str, Query(max_length=200, description="a signal just sent: its answer is shown")] = "",
) -> Response:
    session = signed_in(request)
    found = await c.apis.workflow(key_of(session), workflow_id)
    running = found.status in ("running", "waiting", "attention", "accepted")
    waiting_until = found.waiting_until if isinstance(found, WorkflowDetail) else None
    offered = (await c.apis.signals(key_of(session), workflow_id)).signals if running else []
    signal = None
    if sent:  # what a form just sent; one that cannot be read any more is just not shown
        try:
            signal = await c.apis.signal(key_of(session), sent)
        except ApiProblem:
            signal = None
    return render(
        c,
        request,
        "workflow.html",
        workflow=found.model_dump(mode="json"),
        items=timeline(found.timeline),
        traces=sorted({e.trace_id for e in found.timeline if e.trace_id}),
        may_cancel=running and session.role in ("operator", "submitter"),
        may_reset=session.role == "operator" and found.status == "waiting",
        left=window_left(waiting_until, datetime.now().astimezone()),
        signals=[
            {**o.model_dump(mode="json"), "skeleton": json.dumps(skeleton(o.input_schema), indent=2)}
            for o in offered
        ],
        sent=signal.model_dump(mode="json") if signal else None,
        form_key=uuid.uuid4().hex,
    )


@router.post("/workflows/{workflow_id}/signals/{name}")
async def send_signal(
    request: Request,
    workflow_id: str,
    name: str,
    c: Console,
    csrf: Annotated[str, Form(max_length=200)],
    reason: Annotated[str, Form(min_length=1, max_length=2000)],
    input_json: Annotated[str, Form(alias="input", max_length=100_000)],
    sent_as: Annotated[str, Form(max_length=64, pattern=r"^[0-9a-f]{32}$")],
    wait: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    """A signal from its form: sent, or with ``wait`` an update (the page shows the answer)."""
    check_form(request, csrf)
    session = signed_in(request)
    try:
        given = json.loads(input_json)
    except (ValueError, RecursionError) as exc:
        raise Problem(400, "Input is not JSON", f"the input of {name[:100]}: {exc}") from None
    body = {"input": given, "reason": reason}
    # The form's own key: sent again (a double click, a reload), it is still one signal.
    sent = await c.apis.send_signal(
        key_of(session), workflow_id, name, body, as_update=bool(wait), sent_as=f"console:{sent_as}"
    )
    return redirect(f"/workflows/{workflow_id}?{urlencode({'sent': sent.signal_id})}")


@router.get("/workflows/{workflow_id}/reset", response_class=HTMLResponse)
async def reset_page(
    request: Request,
    workflow_id: str,
    c: Console,
    event: Annotated[str, Query(max_length=64, description="the step to go back to (an event id)")],
) -> Response:
    """What a reset to ``event`` does, and the form that asks for it (operators): a reason,
    and for the start event (the submission's input) its input to correct."""
    session = signed_in(request)
    found = await c.apis.workflow(key_of(session), workflow_id)
    entry = next((e for e in found.timeline if e.event_id == event), None)
    if entry is None:
        raise Problem(
            404, "No such step", f"event {event[:64]} is not in the timeline of {workflow_id[:200]}"
        )
    after = [e.event_type for e in found.timeline[found.timeline.index(entry) + 1 :] if e.undone_by is None]
    return render(
        c,
        request,
        "reset.html",
        workflow=found.model_dump(mode="json"),
        point=entry.model_dump(mode="json"),
        after=[t for t in after if not t.startswith("workflow.reset_")],
        editable=_is_start_event(found.timeline, entry),
        payload=json.dumps(entry.payload, indent=2),
        form_key=uuid.uuid4().hex,
    )


def _is_start_event(entries: list[TimelineEntry], entry: TimelineEntry) -> bool:
    """The submission's input (caused by workflow.started, stated by the gateway): the one
    event a reset may correct."""
    started = {e.event_id for e in entries if e.event_type == "workflow.started"}
    return entry.producer == "gateway" and entry.causation_id in started


@router.post("/workflows/{workflow_id}/reset")
async def reset(
    request: Request,
    workflow_id: str,
    c: Console,
    csrf: Annotated[str, Form(max_length=200)],
    event: Annotated[str, Form(max_length=64)],
    reason: Annotated[str, Form(min_length=1, max_length=2000)],
    sent_as: Annotated[str, Form(max_length=64, pattern=r"^[0-9a-f]{32}$")],
    input_json: Annotated[str, Form(alias="input", max_length=100_000)] = "",
    original: Annotated[str, Form(max_length=100_000)] = "",
) -> Response:
    """The reset, asked of the gateway (the form's own key: sent twice, it is one reset);
    with the input corrected (it differs from the event's), an edit-and-reset."""
    check_form(request, csrf)
    session = signed_in(request)
    body: dict[str, Any] = {"event_id": event, "reason": reason}
    if input_json.strip():
        try:
            given = json.loads(input_json)
        except (ValueError, RecursionError) as exc:
            raise Problem(400, "Input is not JSON", f"the corrected input: {exc}") from None
        try:
            unchanged = bool(original) and given == json.loads(original)
        except (ValueError, RecursionError):
            unchanged = False
        if not unchanged:
            body["input"] = given
    await c.apis.reset(key_of(session), workflow_id, body, sent_as=f"console:{sent_as}")
    return redirect(f"/workflows/{workflow_id}")


@router.get("/workflows/{workflow_id}/cancel", response_class=HTMLResponse)
async def cancel_page(request: Request, workflow_id: str, c: Console) -> Response:
    signed_in(request)
    return render(
        c,
        request,
        "confirm.html",
        title=f"Cancel workflow {workflow_id}?",
        consequence="It ends as cancelled and what it did is undone (a reserved budget is released). "
        "This cannot be taken back.",
        action=f"/workflows/{workflow_id}/cancel",
        button="Cancel the workflow",
        back=f"/workflows/{workflow_id}",
        reason_required=True,
    )


@router.post("/workflows/{workflow_id}/cancel")
async def cancel(
    request: Request,
    workflow_id: str,
    c: Console,
    csrf: Annotated[str, Form(max_length=200)],
    reason: Annotated[str, Form(min_length=1, max_length=2000)],
) -> Response:
    check_form(request, csrf)
    session = signed_in(request)
    await c.apis.cancel(key_of(session), workflow_id, reason)
    return redirect(f"/workflows/{workflow_id}")
