"""Dead letters: the list, one letter with its original record and audit, and an
operator's redrive or discard (confirmed first)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response

from chorus.platform.console.handlers import (
    CATEGORIES,
    LETTER_STATUSES,
    Console,
    check_form,
    key_of,
    redirect,
    render,
    signed_in,
)

router = APIRouter()


@router.get("/dead-letters", response_class=HTMLResponse)
async def letters(
    request: Request,
    c: Console,
    status: Annotated[str, Query(max_length=40)] = "open",
    service: Annotated[str, Query(max_length=200)] = "",
    category: Annotated[str, Query(max_length=40)] = "",
) -> Response:
    session = signed_in(request)
    params = {k: v for k, v in {"status": status, "service": service, "category": category}.items() if v}
    found = await c.apis.letters(key_of(session), {**params, "limit": 100})
    return render(
        c,
        request,
        "letters.html",
        letters=[x.model_dump(mode="json") for x in found],
        filters={"status": status, "service": service, "category": category},
        statuses=LETTER_STATUSES,
        categories=CATEGORIES,
    )


@router.get("/dead-letters/{letter_id}", response_class=HTMLResponse)
async def letter_page(request: Request, letter_id: str, c: Console) -> Response:
    session = signed_in(request)
    found = await c.apis.letter(key_of(session), letter_id)
    original = found.original
    payload = (
        json.dumps(original.value_json, indent=2, ensure_ascii=False)
        if original.value_is_json
        else original.value_b64 or ""
    )
    return render(
        c,
        request,
        "letter.html",
        letter=found.model_dump(mode="json"),
        payload=payload,
        may_act=session.role == "operator" and found.status == "open",
    )


@router.get("/dead-letters/{letter_id}/{action}", response_class=HTMLResponse)
async def letter_confirm(request: Request, letter_id: str, action: str, c: Console) -> Response:
    signed_in(request)
    if action not in ("redrive", "discard"):
        return render(c, request, "error.html", 404, title="Not found", detail="No such page.")
    consequence = (
        "Its original record is published again to the topic it came from, and its service handles it anew."
        if action == "redrive"
        else "Its service stops waiting for it: the workflow behind it moves on without it. This cannot "
        "be taken back."
    )
    return render(
        c,
        request,
        "confirm.html",
        title=f"{action.capitalize()} dead letter {letter_id}?",
        consequence=consequence,
        action=f"/dead-letters/{letter_id}/{action}",
        button=action.capitalize(),
        back=f"/dead-letters/{letter_id}",
        reason_required=action == "discard",
    )


@router.post("/dead-letters/{letter_id}/{action}")
async def letter_act(
    request: Request,
    letter_id: str,
    action: str,
    c: Console,
    csrf: Annotated[str, Form(max_length=200)],
    reason: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    check_form(request, csrf)
    session = signed_in(request)
    if action == "redrive":
        await c.apis.redrive(key_of(session), letter_id, reason)
    elif action == "discard":
        await c.apis.discard(key_of(session), letter_id, reason)
    else:
        return render(c, request, "error.html", 404, title="Not found", detail="No such action.")
    return redirect(f"/dead-letters/{letter_id}")
