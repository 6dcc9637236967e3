"""Signing in (with an API key the gateway knows) and out."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response

from chorus.platform.console.adapters.apis import ApiProblem
from chorus.platform.console.domain import home, sign_in
from chorus.platform.console.handlers import Console, check_form, local_path, redirect, render, session_of

router = APIRouter()


@router.get("/", response_class=HTMLResponse)
async def index(request: Request) -> Response:
    session = session_of(request)
    return redirect(home(session.role) if session.signed_in else "/signin")


@router.get("/signin", response_class=HTMLResponse)
async def signin_page(
    request: Request, c: Console, next: Annotated[str | None, Query(max_length=2000)] = None
) -> Response:
    return render(c, request, "signin.html", next=local_path(next) or "", error=None)


@router.post("/signin", response_class=HTMLResponse)
async def signin(
    request: Request,
    c: Console,
    api_key: Annotated[str, Form(max_length=500)],
    csrf: Annotated[str, Form(max_length=200)],
    next: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    check_form(request, csrf)
    try:
        me = await c.apis.me(api_key.strip())
    except ApiProblem:
        return render(
            c,
            request,
            "signin.html",
            401,
            next=local_path(next) or "",
            error="That key is not known. Check it and try again.",
        )
    request.state.session = sign_in(me, api_key.strip(), datetime.now().astimezone())
    return redirect(local_path(next) or home(request.state.session.role))


@router.post("/signout")
async def signout(request: Request, csrf: Annotated[str, Form(max_length=200)]) -> Response:
    check_form(request, csrf)
    request.state.sign_out = True
    return redirect("/signin")
