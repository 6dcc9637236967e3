"""A reviewer's queue, one approval (from a notification's signed link too) and its decision."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response

from chorus.platform.console.adapters.apis import ApiProblem
from chorus.platform.console.domain import age, timeline, window_left
from chorus.platform.console.handlers import (
    Console,
    ConsoleDeps,
    check_form,
    key_of,
    redirect,
    render,
    signed_in,
)
from chorus.web.links import LinkCheck, check_link

router = APIRouter()


@router.get("/approvals", response_class=HTMLResponse)
async def approvals(request: Request, c: Console) -> Response:
    session = signed_in(request)
    items = await c.apis.approvals(key_of(session))
    now = datetime.now().astimezone()
    rows = [
        {
            **a.model_dump(mode="json"),
            "age": age(a.requested_at, now),
            "left": window_left(a.waiting_until, now),
            "summary": a.context.get("summary", "") if isinstance(a.context, dict) else "",
        }
        for a in items
    ]
    return render(c, request, "approvals.html", approvals=rows)


def _link_refused(
    c: ConsoleDeps, request: Request, to: str | None, exp: str | None, sig: str | None
) -> Response | None:
    """A link from a notification must be one the notifier signed, still holding: the
    error page saying why when it is not, None when it holds."""
    check = check_link(
        c.settings.link_key.get_secret_value(),
        request.url.path,
        to or "",
        exp or "",
        sig or "",
        datetime.now().astimezone(),
    )
    if check is LinkCheck.FORGED:
        return render(
            c,
            request,
            "error.html",
            400,
            title="Not a valid link",
            detail="This link was altered or not sent by Chorus. Open the approval from your queue instead.",
        )
    if check is LinkCheck.EXPIRED:
        return render(
            c,
            request,
            "error.html",
            410,
            title="This link has expired",
            detail="The approval's window for the tier it was sent to has passed: it may have "
            "escalated or been decided. Your queue shows what waits for you now.",
        )
    return None


@router.get("/approvals/{approval_id}", response_class=HTMLResponse)
async def approval_page(
    request: Request,
    approval_id: str,
    c: Console,
    to: Annotated[str | None, Query(max_length=300)] = None,
    exp: Annotated[str | None, Query(max_length=20)] = None,
    sig: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    session = signed_in(request)
    if to is not None or exp is not None or sig is not None:
        refused = _link_refused(c, request, to, exp, sig)
        if refused is not None:
            return refused
    key = key_of(session)
    found = await c.apis.approval(key, approval_id)
    workflow = await c.apis.workflow(key, found.workflow_id)
    context = found.context if isinstance(found.context, dict) else None
    return render(
        c,
        request,
        "approval.html",
        approval=found.model_dump(mode="json"),
        context=context,
        inputs=json.dumps((context or {}).get("inputs") or {}, indent=2, ensure_ascii=False),
        left=window_left(found.waiting_until, datetime.now().astimezone()),
        workflow=workflow.model_dump(mode="json"),
        items=timeline(workflow.timeline),
        may_decide=session.role == "reviewer" and found.status == "pending" and found.tier == session.tier,
        error=request.query_params.get("error"),
    )


@router.post("/approvals/{approval_id}/decision")
async def decide(
    request: Request,
    approval_id: str,
    c: Console,
    decision: Annotated[str, Form(pattern="^(approve|reject|revise)$")],
    csrf: Annotated[str, Form(max_length=200)],
    comment: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    check_form(request, csrf)
    session = signed_in(request)
    try:
        await c.apis.decide(key_of(session), approval_id, decision, comment)
    except ApiProblem as exc:
        return redirect(f"/approvals/{approval_id}?" + urlencode({"error": f"{exc.title}: {exc.detail}"}))
    return redirect(f"/approvals/{approval_id}?decided=1")
