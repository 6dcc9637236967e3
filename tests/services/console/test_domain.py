"""The console's own rules, without a browser: sessions, CSRF, redirects, headers. The APIs
behind it answer through httpx's MockTransport (the browser test uses the real ones)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from chorus.contracts.api.audit_projector import TimelineEntry
from chorus.contracts.api.gateway import Me
from chorus.platform.console.adapters.apis import Apis
from chorus.platform.console.adapters.cookies import COOKIE, SessionCookies
from chorus.platform.console.bootstrap import create_app
from chorus.platform.console.config import Settings
from chorus.platform.console.domain import anonymous, sign_in, still_valid, timeline

ME = Me(principal="dana.manager", role="reviewer", tier="manager")


def answer(request: httpx.Request) -> httpx.Response:
    if request.headers.get("authorization") != "Bearer good-key":
        return httpx.Response(401, json={"title": "Unauthorized", "detail": "unknown key"})
    if request.url.path == "/v1/me":
        return httpx.Response(200, json=ME.model_dump())
    if request.url.path == "/v1/approvals":
        return httpx.Response(200, json={"assignee": ME.principal, "tier": ME.tier, "approvals": []})
    return httpx.Response(404, json={"title": "Not found", "detail": request.url.path})


@pytest.fixture
async def console() -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(env="demo")
    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    apis = Apis(
        client, gateway="http://gw", deadletters="http://dl", analytics="http://an", notifier="http://no"
    )
    app = httpx.ASGITransport(app=create_app(settings, apis))
    async with httpx.AsyncClient(transport=app, base_url="http://console.test") as browser:
        yield browser


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


async def test_pages_need_sign_in_and_come_back_after_it(console: httpx.AsyncClient) -> None:
    away = await console.get("/approvals/appr-1?to=x&exp=1&sig=y", follow_redirects=False)
    assert away.status_code == 303
    assert away.headers["location"] == "/signin?next=%2Fapprovals%2Fappr-1%3Fto%3Dx%26exp%3D1%26sig%3Dy"
    form = await console.get(away.headers["location"])
    assert 'value="/approvals/appr-1?to=x&amp;exp=1&amp;sig=y"' in form.text
    signed = await console.post(
        "/signin",
        data={"api_key": "good-key", "csrf": csrf_of(form.text), "next": "/approvals"},
        follow_redirects=False,
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/approvals"
    assert "Waiting for manager" in (await console.get("/approvals")).text


async def test_an_unknown_key_is_told_and_not_signed_in(console: httpx.AsyncClient) -> None:
    form = await console.get("/signin")
    refused = await console.post("/signin", data={"api_key": "bad-key", "csrf": csrf_of(form.text)})
    assert refused.status_code == 401 and "That key is not known" in refused.text
    assert (await console.get("/approvals", follow_redirects=False)).status_code == 303


async def test_a_form_without_this_sessions_token_or_from_another_site_is_refused(
    console: httpx.AsyncClient,
) -> None:
    token = csrf_of((await console.get("/signin")).text)
    forged = await console.post("/signin", data={"api_key": "good-key", "csrf": "guessed"})
    assert forged.status_code == 403 and "Form expired" in forged.text
    elsewhere = await console.post(
        "/signin", data={"api_key": "good-key", "csrf": token}, headers={"Origin": "https://evil.example"}
    )
    assert elsewhere.status_code == 403
    # Signing in replaces the token: one planted before sign-in is worth nothing after it.
    await console.post("/signin", data={"api_key": "good-key", "csrf": token}, follow_redirects=False)
    stale = await console.post("/signout", data={"csrf": token})
    assert stale.status_code == 403


async def test_sign_in_returns_only_to_a_page_of_this_site(console: httpx.AsyncClient) -> None:
    token = csrf_of((await console.get("/signin")).text)
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        signed = await console.post(
            "/signin", data={"api_key": "good-key", "csrf": token, "next": target}, follow_redirects=False
        )
        assert signed.headers["location"] == "/approvals", target
        token = csrf_of((await console.get("/approvals")).text)


async def test_pages_carry_security_headers_and_a_sealed_http_only_cookie(console: httpx.AsyncClient) -> None:
    page = await console.get("/signin")
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["cache-control"] == "no-store"
    cookie = page.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "good-key" not in cookie


def test_a_tampered_or_foreign_cookie_opens_as_no_session() -> None:
    cookies = SessionCookies(Settings(env="demo").session_key.get_secret_value())
    sealed = cookies.seal(sign_in(ME, "good-key", datetime.now(timezone.utc)))
    assert cookies.open(sealed) is not None and cookies.open(sealed).principal == "dana.manager"  # type: ignore[union-attr]
    assert cookies.open(sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]) is None
    other = SessionCookies("b3RoZXItY29uc29sZS1zZXNzaW9uLWtleS0zMmJ5dGU=")
    assert other.open(sealed) is None and cookies.open("not a cookie") is None


def test_an_idle_session_and_a_too_old_one_are_signed_out() -> None:
    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
    session = sign_in(ME, "good-key", t0)
    kept = still_valid(session, t0 + timedelta(minutes=29), idle_s=1800, max_s=43200)
    assert kept.signed_in and kept.seen_at == t0 + timedelta(minutes=29)
    assert not still_valid(session, t0 + timedelta(minutes=31), idle_s=1800, max_s=43200).signed_in
    # Busy all day: still out after the longest a session may last.
    busy = session
    for minute in range(0, 13 * 60, 20):
        busy = still_valid(busy, t0 + timedelta(minutes=minute), idle_s=1800, max_s=43200)
    assert not busy.signed_in
    assert not still_valid(anonymous(), t0, idle_s=1, max_s=1).signed_in


def test_the_timeline_tells_a_refused_approval_from_one_nobody_answered() -> None:
    def entry(payload: dict[str, object]) -> TimelineEntry:
        now = datetime.now(timezone.utc)
        return TimelineEntry(
            event_id="e-1", origin="topic", event_type="approval.decided", schema_version=1,
            producer="approval_gate", producer_version="0.1.0", occurred_at=now, recorded_at=now,
            trace_id=None, causation_id=None, decision="reject", actor=None, external_call=None,
            payload=payload,
        )  # fmt: skip

    refused, elapsed = timeline(
        [
            entry({"decision": "reject", "tier": "none", "automatic": True}),
            entry({"decision": "reject", "tier": "director", "automatic": True}),
        ]
    )
    assert refused.detail == "reject: no approval policy rule or chain routes it"
    assert elapsed.detail == "reject by tier director (automatic: no answer in time)"
