"""What every page of the console shares: who is signed in, the CSRF check of forms,
rendering and redirecting, and what the pages work with (:class:`ConsoleDeps`, by
dependency injection). The pages themselves are in :mod:`chorus.platform.console.pages`: each asks the
public APIs with the signed-in person's key and renders a template. Forms post back there
(CSRF-checked), and their answers redirect (POST, redirect, GET), so a reload never repeats
a decision."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from chorus.base.compat import fromisoformat
from chorus.platform.console.adapters.apis import Apis
from chorus.platform.console.config import Settings
from chorus.platform.console.domain import NAV, Session, anonymous

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


@dataclass(frozen=True)
class ConsoleDeps:
    """What the pages work with: the settings, the API clients and the templates."""

    settings: Settings
    apis: Apis
    templates: Jinja2Templates


def console(request: Request) -> ConsoleDeps:
    deps: ConsoleDeps = request.app.state.console
    return deps


Console = Annotated[ConsoleDeps, Depends(console)]


def render(
    c: ConsoleDeps, request: Request, name: str, status_code: int = 200, **context: Any
) -> HTMLResponse:
    return render_page(c.templates, request, name, status_code, **context)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def as_utc(value: str) -> str:
    """A ``datetime-local`` field's value (no zone) as UTC ISO 8601, as the API takes it."""
    if not value:
        return ""
    try:
        moment = fromisoformat(value)
    except ValueError:
        return value  # the API names it in its answer
    return moment.isoformat() if moment.tzinfo else moment.isoformat() + "+00:00"
