"""Bulk actions (operators): the latest with how far each got, a form that counts what a
query finds (a dry run) before it cancels, signals, resets, redrives or moves them, and one
action item by item."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from chorus.contracts.api.gateway import BULK_TARGETS
from chorus.platform.console.handlers import Console, check_form, key_of, redirect, render, signed_in
from chorus.web.webapi import Problem

router = APIRouter()


@router.get("/bulk-actions", response_class=HTMLResponse)
async def bulk_actions(request: Request, c: Console) -> Response:
    session = signed_in(request)
    found = await c.apis.bulk_actions(key_of(session))
    return render(
        c,
        request,
        "bulk.html",
        actions=[a.model_dump(mode="json") for a in found],
        form={},
        dry=None,
        form_key=uuid.uuid4().hex,
    )


@router.post("/bulk-actions", response_class=HTMLResponse)
async def start(
    request: Request,
    c: Console,
    csrf: Annotated[str, Form(max_length=200)],
    sent_as: Annotated[str, Form(max_length=64, pattern=r"^[0-9a-f]{32}$")],
    action: Annotated[Literal["cancel", "signal", "reset", "redrive", "repin"], Form()],
    query: Annotated[str, Form(min_length=1, max_length=1000)],
    reason: Annotated[str, Form(min_length=1, max_length=2000)],
    rate_per_s: Annotated[float, Form(gt=0, le=100)] = 10.0,
    signal: Annotated[str, Form(max_length=40)] = "",
    input_json: Annotated[str, Form(alias="input", max_length=100_000)] = "",
    dry_run: Annotated[str, Form(max_length=10)] = "",
    reset_to: Annotated[str, Form(max_length=80)] = "",
    service: Annotated[str, Form(max_length=80)] = "",
    to_release: Annotated[str, Form(max_length=80)] = "",
) -> Response:
    """A dry run answers on the form (what it would act on); the action itself goes to its page."""
    check_form(request, csrf)
    session = signed_in(request)
    body: dict[str, Any] = {
        "action": action,
        "query": query,
        "reason": reason,
        "rate_per_s": rate_per_s,
        "dry_run": bool(dry_run),
    }
    if action == "signal":
        try:
            body |= {"signal": signal, "input": json.loads(input_json or "{}")}
        except (ValueError, RecursionError) as exc:
            raise Problem(400, "Input is not JSON", f"the signal's input: {exc}") from None
    targets = {"reset_to": reset_to, "service": service, "to_release": to_release}
    # The fields of this action only (the gateway refuses another action's, naming them).
    body |= {name: value.strip() for name, value in targets.items() if name in BULK_TARGETS[action]}
    key = f"console:{sent_as}{':dry' if dry_run else ''}"
    answer = await c.apis.start_bulk(key_of(session), body, sent_as=key)
    if answer.bulk_id is not None:
        return redirect(f"/bulk-actions/{answer.bulk_id}")
    found = await c.apis.bulk_actions(key_of(session))
    form = {
        "action": action,
        "query": query,
        "reason": reason,
        "rate_per_s": rate_per_s,
        "signal": signal,
        **targets,
    }
    return render(
        c,
        request,
        "bulk.html",
        actions=[a.model_dump(mode="json") for a in found],
        form={**form, "input": input_json},
        dry=answer.model_dump(mode="json"),
        form_key=sent_as,
    )


@router.get("/bulk-actions/{bulk_id}", response_class=HTMLResponse)
async def bulk_action(request: Request, bulk_id: str, c: Console) -> Response:
    session = signed_in(request)
    found = await c.apis.bulk_action(key_of(session), bulk_id)
    return render(c, request, "bulk_action.html", action=found.model_dump(mode="json"))
