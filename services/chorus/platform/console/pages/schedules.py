"""Schedules: the list (a submitter's own, everyone's for operators and auditors), one
schedule with its runs and who changed it, and pausing, resuming, triggering or deleting it
(its creator or an operator: the gateway decides)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from chorus.platform.console.handlers import Console, check_form, key_of, redirect, render, signed_in

router = APIRouter()


@router.get("/schedules", response_class=HTMLResponse)
async def schedules(request: Request, c: Console) -> Response:
    session = signed_in(request)
    found = await c.apis.schedules(key_of(session))
    return render(c, request, "schedules.html", schedules=[s.model_dump(mode="json") for s in found])


@router.get("/schedules/{schedule_id}", response_class=HTMLResponse)
async def schedule_page(request: Request, schedule_id: str, c: Console) -> Response:
    session = signed_in(request)
    found = await c.apis.schedule(key_of(session), schedule_id)
    may_act = session.role in ("operator", "submitter") and found.state != "deleted"
    return render(c, request, "schedule.html", schedule=found.model_dump(mode="json"), may_act=may_act)


@router.post("/schedules/{schedule_id}/{action}")
async def act(
    request: Request,
    schedule_id: str,
    action: Literal["pause", "resume", "trigger", "delete"],
    c: Console,
    csrf: Annotated[str, Form(max_length=200)],
) -> Response:
    check_form(request, csrf)
    session = signed_in(request)
    await c.apis.act_on_schedule(key_of(session), schedule_id, action)
    return redirect(f"/schedules/{schedule_id}")
