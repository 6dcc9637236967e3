"""The console's pages: each asks the public APIs with the signed-in person's key and
renders a template. Forms post back here (CSRF-checked), and their answers redirect
(POST, redirect, GET), so a reload never repeats a decision."""

from __future__ import annotations

import hmac
import json
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from chorus.web.links import LinkCheck, check_link
from chorus_contracts.lifecycle import WORKFLOW_STATUSES
from console.adapters.apis import ApiProblem, Apis
from console.config import Settings
from console.domain import (
    NAV,
    Session,
    age,
    anonymous,
    chart,
    dead_letters_by_category,
    home,
    outcome_series,
    sign_in,
    timeline,
    window_left,
)

LETTER_STATUSES = ("open", "redriven", "discarded")
CATEGORIES = ("transient", "persistent", "semantic", "poison")


class SignInRequired(Exception):
    """The page needs a signed-in person: redirect to the sign-in page, then back."""


class CsrfRefused(Exception):
    """A form without this session's token (or from another origin)."""


def session_of(request: Request) -> Session:
    session: Session = request.state.session
    return session


def signed_in(request: Request) -> Session:
    session = session_of(request)
    if not session.signed_in:
        raise SignInRequired()
    return session


def key_of(session: Session) -> str:
    assert session.api_key is not None
    return session.api_key


def check_form(request: Request, token: str) -> None:
    """The form carries this session's CSRF token, and (when the browser says) comes from
    this origin."""
    session = session_of(request)
    if not hmac.compare_digest(token.encode(), session.csrf.encode()):
        raise CsrfRefused()
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.url.netloc:
        raise CsrfRefused()


def local_path(target: str | None) -> str | None:
    """``target`` when it is a path on this site (never another host: no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return None
    return target


def render_page(
    templates: Jinja2Templates, request: Request, name: str, status_code: int = 200, **context: Any
) -> HTMLResponse:
    """A page with what every page shows: who is signed in and their navigation."""
    session: Session = getattr(request.state, "session", None) or anonymous()
    return templates.TemplateResponse(
        request,
        name,
        {"session": session, "nav": NAV.get(session.role or "", []), **context},
        status_code=status_code,
    )


def routes(settings: Settings, apis: Apis, templates: Jinja2Templates) -> APIRouter:
    router = APIRouter()

    def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return render_page(templates, request, name, status_code, **context)

    def redirect(url: str) -> RedirectResponse:
        return RedirectResponse(url, status_code=303)

    # -- signing in and out -----------------------------------------------------------------

    @router.get("/", response_class=HTMLResponse)
    async def index(request: Request) -> Response:
        session = session_of(request)
        return redirect(home(session.role) if session.signed_in else "/signin")

    @router.get("/signin", response_class=HTMLResponse)
    async def signin_page(
        request: Request, next: Annotated[str | None, Query(max_length=2000)] = None
    ) -> Response:
        return render(request, "signin.html", next=local_path(next) or "", error=None)

    @router.post("/signin", response_class=HTMLResponse)
    async def signin(
        request: Request,
        api_key: Annotated[str, Form(max_length=500)],
        csrf: Annotated[str, Form(max_length=200)],
        next: Annotated[str, Form(max_length=2000)] = "",
    ) -> Response:
        check_form(request, csrf)
        try:
            me = await apis.me(api_key.strip())
        except ApiProblem:
            return render(
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

    # -- approvals --------------------------------------------------------------------------

    @router.get("/approvals", response_class=HTMLResponse)
    async def approvals(request: Request) -> Response:
        session = signed_in(request)
        items = await apis.approvals(key_of(session))
        now = datetime.now().astimezone()
        rows = [
            {
                **a,
                "age": age(a.get("requested_at"), now),
                "left": window_left(a.get("waiting_until"), now),
                "summary": (a.get("context") or {}).get("summary", "")
                if isinstance(a.get("context"), dict)
                else "",
            }
            for a in items
        ]
        return render(request, "approvals.html", approvals=rows)

    @router.get("/approvals/{approval_id}", response_class=HTMLResponse)
    async def approval_page(
        request: Request,
        approval_id: str,
        to: Annotated[str | None, Query(max_length=300)] = None,
        exp: Annotated[str | None, Query(max_length=20)] = None,
        sig: Annotated[str | None, Query(max_length=200)] = None,
    ) -> Response:
        session = signed_in(request)
        if to is not None or exp is not None or sig is not None:
            # A link from a notification: it must be one the notifier signed, still holding.
            check = check_link(
                settings.link_key.get_secret_value(),
                request.url.path,
                to or "",
                exp or "",
                sig or "",
                datetime.now().astimezone(),
            )
            if check is LinkCheck.FORGED:
                return render(
                    request,
                    "error.html",
                    400,
                    title="Not a valid link",
                    detail="This link was altered or not sent by Chorus. "
                    "Open the approval from your queue instead.",
                )
            if check is LinkCheck.EXPIRED:
                return render(
                    request,
                    "error.html",
                    410,
                    title="This link has expired",
                    detail="The approval's window for the tier it was sent to has passed: it may have "
                    "escalated or been decided. Your queue shows what waits for you now.",
                )
        key = key_of(session)
        found = await apis.approval(key, approval_id)
        workflow = await apis.workflow(key, found["workflow_id"])
        now = datetime.now().astimezone()
        context = found.get("context") if isinstance(found.get("context"), dict) else None
        return render(
            request,
            "approval.html",
            approval=found,
            context=context,
            inputs=json.dumps((context or {}).get("inputs") or {}, indent=2, ensure_ascii=False),
            left=window_left(found.get("waiting_until"), now),
            workflow=workflow,
            items=timeline(workflow.get("timeline") or []),
            may_decide=session.role == "reviewer"
            and found["status"] == "pending"
            and found.get("tier") == session.tier,
            error=request.query_params.get("error"),
        )

    @router.post("/approvals/{approval_id}/decision")
    async def decide(
        request: Request,
        approval_id: str,
        decision: Annotated[str, Form(pattern="^(approve|reject|revise)$")],
        csrf: Annotated[str, Form(max_length=200)],
        comment: Annotated[str, Form(max_length=2000)] = "",
    ) -> Response:
        check_form(request, csrf)
        session = signed_in(request)
        try:
            await apis.decide(key_of(session), approval_id, decision, comment)
        except ApiProblem as exc:
            return redirect(f"/approvals/{approval_id}?" + urlencode({"error": f"{exc.title}: {exc.detail}"}))
        return redirect(f"/approvals/{approval_id}?decided=1")

    # -- workflows --------------------------------------------------------------------------

    @router.get("/workflows", response_class=HTMLResponse)
    async def workflows(
        request: Request,
        status: Annotated[str, Query(max_length=40)] = "",
        workflow_type: Annotated[str, Query(max_length=200)] = "",
        stage: Annotated[str, Query(max_length=200)] = "",
        submitted_by: Annotated[str, Query(max_length=200)] = "",
        started_after: Annotated[str, Query(max_length=40)] = "",
        started_before: Annotated[str, Query(max_length=40)] = "",
        q: Annotated[str, Query(max_length=255)] = "",
        cursor: Annotated[str, Query(max_length=300)] = "",
    ) -> Response:
        session = signed_in(request)
        filters = {
            "status": status,
            "workflow_type": workflow_type,
            "stage": stage,
            "submitted_by": submitted_by,
            "started_after": _as_utc(started_after),
            "started_before": _as_utc(started_before),
            "q": q,
        }
        params = {k: v for k, v in filters.items() if v}
        # What the form shows and the next page's link repeats: the times as typed.
        shown = {**filters, "started_after": started_after, "started_before": started_before}
        error = None
        try:
            page = await apis.workflows(
                key_of(session), {**params, **({"cursor": cursor} if cursor else {}), "limit": 25}
            )
        except ApiProblem as exc:
            page, error = {"workflows": [], "next_cursor": None}, f"{exc.title}: {exc.detail}"
        next_url = None
        if page.get("next_cursor"):
            kept = {k: v for k, v in shown.items() if v}
            next_url = "/workflows?" + urlencode({**kept, "cursor": page["next_cursor"]})
        template = "_workflow_rows.html" if request.headers.get("hx-request") else "workflows.html"
        return render(
            request,
            template,
            workflows=page["workflows"],
            next_url=next_url,
            filters=shown,
            statuses=WORKFLOW_STATUSES,
            error=error,
        )

    @router.get("/workflows/{workflow_id}", response_class=HTMLResponse)
    async def workflow_page(request: Request, workflow_id: str) -> Response:
        session = signed_in(request)
        found = await apis.workflow(key_of(session), workflow_id)
        running = found.get("status") in ("running", "waiting", "attention", "accepted")
        return render(
            request,
            "workflow.html",
            workflow=found,
            items=timeline(found.get("timeline") or []),
            traces=sorted({e["trace_id"] for e in found.get("timeline") or [] if e.get("trace_id")}),
            may_cancel=running and session.role in ("operator", "submitter"),
            left=window_left(found.get("waiting_until"), datetime.now().astimezone()),
        )

    @router.get("/workflows/{workflow_id}/cancel", response_class=HTMLResponse)
    async def cancel_page(request: Request, workflow_id: str) -> Response:
        signed_in(request)
        return render(
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
        csrf: Annotated[str, Form(max_length=200)],
        reason: Annotated[str, Form(min_length=1, max_length=2000)],
    ) -> Response:
        check_form(request, csrf)
        session = signed_in(request)
        await apis.cancel(key_of(session), workflow_id, reason)
        return redirect(f"/workflows/{workflow_id}")

    # -- dead letters -------------------------------------------------------------------------

    @router.get("/dead-letters", response_class=HTMLResponse)
    async def letters(
        request: Request,
        status: Annotated[str, Query(max_length=40)] = "open",
        service: Annotated[str, Query(max_length=200)] = "",
        category: Annotated[str, Query(max_length=40)] = "",
    ) -> Response:
        session = signed_in(request)
        params = {k: v for k, v in {"status": status, "service": service, "category": category}.items() if v}
        found = await apis.letters(key_of(session), {**params, "limit": 100})
        return render(
            request,
            "letters.html",
            letters=found,
            filters={"status": status, "service": service, "category": category},
            statuses=LETTER_STATUSES,
            categories=CATEGORIES,
        )

    @router.get("/dead-letters/{letter_id}", response_class=HTMLResponse)
    async def letter_page(request: Request, letter_id: str) -> Response:
        session = signed_in(request)
        found = await apis.letter(key_of(session), letter_id)
        original = found.get("original") or {}
        payload = (
            json.dumps(original.get("value_json"), indent=2, ensure_ascii=False)
            if original.get("value_is_json")
            else original.get("value_text") or original.get("value_b64") or ""
        )
        return render(
            request,
            "letter.html",
            letter=found,
            payload=payload,
            may_act=session.role == "operator" and found.get("status") == "open",
        )

    @router.get("/dead-letters/{letter_id}/{action}", response_class=HTMLResponse)
    async def letter_confirm(request: Request, letter_id: str, action: str) -> Response:
        signed_in(request)
        if action not in ("redrive", "discard"):
            return render(request, "error.html", 404, title="Not found", detail="No such page.")
        consequence = (
            "Its original record is published again to the topic it came from, and its service handles it "
            "anew."
            if action == "redrive"
            else "Its service stops waiting for it: the workflow behind it moves on without it. This cannot "
            "be taken back."
        )
        return render(
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
        csrf: Annotated[str, Form(max_length=200)],
        reason: Annotated[str, Form(max_length=2000)] = "",
    ) -> Response:
        check_form(request, csrf)
        session = signed_in(request)
        if action == "redrive":
            await apis.redrive(key_of(session), letter_id, reason)
        elif action == "discard":
            await apis.discard(key_of(session), letter_id, reason)
        else:
            return render(request, "error.html", 404, title="Not found", detail="No such action.")
        return redirect(f"/dead-letters/{letter_id}")

    # -- outcomes -----------------------------------------------------------------------------

    @router.get("/outcomes", response_class=HTMLResponse)
    async def outcomes(request: Request) -> Response:
        session = signed_in(request)
        buckets = await apis.outcomes(key_of(session))
        types = sorted({b["workflow_type"] for b in buckets})
        panels = []
        for workflow_type in types:
            series = outcome_series(buckets, workflow_type)
            panels.append(
                {
                    "workflow_type": workflow_type,
                    "charts": [chart(name, points) for name, points in series.items()],
                    "dead_letters": dead_letters_by_category(buckets, workflow_type),
                }
            )
        releases = await apis.releases(key_of(session))
        return render(request, "outcomes.html", panels=panels, releases=releases)

    return router


def _as_utc(value: str) -> str:
    """A ``datetime-local`` field's value (no zone) as UTC ISO 8601, as the API takes it."""
    if not value:
        return ""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value  # the API names it in its answer
    return moment.isoformat() if moment.tzinfo else moment.isoformat() + "+00:00"
