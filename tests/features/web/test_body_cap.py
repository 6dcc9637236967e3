"""BodyCap, the API's first middleware, on a bare ASGI exchange: a body that does not
arrive in time is a 408 the app never sees; one that does reaches the app whole."""

from __future__ import annotations

import asyncio
import json

from starlette.types import Message, Receive, Scope, Send

from chorus.web.webapi import BodyCap

SCOPE: Scope = {
    "type": "http",
    "method": "POST",
    "path": "/things",
    "headers": [(b"content-type", b"application/json"), (b"content-length", b"8")],
}


def trickle(*chunks: bytes) -> Receive:
    """The chunks as http.request messages (more to come after each), then nothing ever."""
    pending = list(chunks)

    async def receive() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(0), "more_body": True}
        await asyncio.Event().wait()  # the client holds the connection and sends no more
        raise AssertionError("unreachable")

    return receive


async def test_a_body_that_does_not_arrive_in_time_is_a_408_the_app_never_sees() -> None:
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    cap = BodyCap(app, max_body_bytes=1024, body_timeout_s=0.05)
    await asyncio.wait_for(cap(SCOPE, trickle(b'{"a"', b": 1"), send), 5)

    assert seen == []
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]
    assert json.loads(sent[1]["body"])["detail"] == "the body did not arrive within 0.05 s"


async def test_a_body_that_arrives_in_pieces_in_time_reaches_the_app_whole() -> None:
    bodies: list[bytes] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        bodies.append((await receive())["body"])

    pieces = [
        {"type": "http.request", "body": b'{"a"', "more_body": True},
        {"type": "http.request", "body": b": 1}", "more_body": False},
    ]

    async def receive() -> Message:
        await asyncio.sleep(0.01)
        return pieces.pop(0)

    async def send(message: Message) -> None:
        raise AssertionError(f"nothing is answered by the cap: {message}")

    await BodyCap(app, max_body_bytes=1024, body_timeout_s=5)(SCOPE, receive, send)
    assert bodies == [b'{"a": 1}']
