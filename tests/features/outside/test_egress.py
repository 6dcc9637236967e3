"""Submitters' URLs never lead into the deployment's own network (SSRF)."""

from __future__ import annotations

import ipaddress

import httpx
import pytest

from chorus.base.errors import TransientError, caused_by_input
from chorus.outside.egress import EgressPolicy, EgressRefusedError, check_egress, pin
from chorus.outside.external import call_json
from chorus.platform.gateway.domain import submitter_urls

NONE = EgressPolicy()


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.0.0.5", "private"),
        ("192.168.1.20", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata endpoint
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped IPv6
        ("fd00:ec2::254", "private"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "not public"),
        ("2002:a9fe:a9fe::", "link-local"),  # 6to4 of 169.254.169.254
    ],
)
def test_inner_addresses_are_refused(address: str, kind: str) -> None:
    reason = NONE.refusal("h", 80, ipaddress.ip_address(address))
    assert reason is not None and kind in reason


def test_public_addresses_and_the_allowed_exceptions_pass() -> None:
    assert NONE.refusal("example.com", 443, ipaddress.ip_address("93.184.216.34")) is None
    sandbox = EgressPolicy.parse("127.0.0.1:9400, 10.20.0.0/16")
    assert sandbox.refusal("127.0.0.1", 9400, ipaddress.ip_address("127.0.0.1")) is None
    assert sandbox.refusal("127.0.0.1", 9401, ipaddress.ip_address("127.0.0.1")) is not None
    assert sandbox.refusal("svc", 80, ipaddress.ip_address("10.20.3.4")) is None
    with pytest.raises(ValueError, match="neither host:port nor a network"):
        EgressPolicy.parse("just-a-host")


async def test_names_are_resolved_before_they_are_judged() -> None:
    with pytest.raises(EgressRefusedError, match="localhost:8080: localhost resolves to a loopback"):
        await check_egress("http://localhost:8080/admin", NONE)
    with pytest.raises(EgressRefusedError, match=r"169\.254\.169\.254:80: .* link-local"):
        await check_egress("http://169.254.169.254/latest/meta-data/", NONE)
    with pytest.raises(EgressRefusedError, match="not a URL Chorus can call"):
        await check_egress("http://example.com:99999/", NONE)
    with pytest.raises(EgressRefusedError, match="is not a host name"):
        await check_egress("https://" + "a" * 64 + ".example/", NONE)  # a label IDNA refuses


async def test_a_call_to_a_submitters_inner_url_is_refused_blaming_the_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHORUS_EGRESS_ALLOW", "")
    async with httpx.AsyncClient() as client:
        with pytest.raises(EgressRefusedError) as refused:
            await call_json(
                client, "POST", "http://127.0.0.1:5432/", what="report delivery", submitter_url=True
            )
    assert caused_by_input(refused.value)


def test_every_url_field_of_a_submission_is_found_with_its_pointer() -> None:
    body = {
        "input": {
            "sources": [{"name": "a", "url": "http://x/1"}, {"name": "b", "url": "http://10.0.0.7/"}],
            "delivery_url": "http://y/",
            "topic": "http://not-a-url-field/",
        },
        "callback_url": "http://z/",
    }
    assert submitter_urls(body) == [
        ("/input/sources/0/url", "http://x/1"),
        ("/input/sources/1/url", "http://10.0.0.7/"),
        ("/input/delivery_url", "http://y/"),
        ("/callback_url", "http://z/"),
    ]


async def test_a_call_is_pinned_to_the_address_that_was_checked() -> None:
    sandbox = EgressPolicy.parse("127.0.0.1:9400")
    pinned = await pin("http://127.0.0.1:9400/hooks?x=1", sandbox)
    assert pinned.url == "http://127.0.0.1:9400/hooks?x=1" and pinned.host_header == "127.0.0.1:9400"
    named = await pin("https://localhost:9400/x", EgressPolicy.parse("127.0.0.0/8,::1/128"))
    assert named.sni_hostname == "localhost" and named.host_header == "localhost:9400"
    assert named.url.startswith(("https://127.0.0.1:9400/", "https://[::1]:9400/"))
    with pytest.raises(TransientError, match="does not resolve"):
        await pin("http://no-such-host.invalid/", NONE)
