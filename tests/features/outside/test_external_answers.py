"""What an outside system answers reaches the caller intact, and never unbounded."""

from __future__ import annotations

import gzip

import httpx
import pytest

from chorus.base.errors import PersistentError
from chorus.outside.external import call_json


def answering(response: httpx.Response) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(lambda request: response))


async def test_a_compressed_answer_is_read_once_and_intact() -> None:
    body = gzip.compress(b'{"payment_id": "pay-1"}')
    client = answering(httpx.Response(200, headers={"content-encoding": "gzip"}, content=body))
    response = await call_json(client, "POST", "https://payments.example/v1/pay", what="payment")
    assert response.json() == {"payment_id": "pay-1"}


async def test_an_answer_over_the_cap_is_refused_not_read_into_memory() -> None:
    client = answering(httpx.Response(200, content=b"x" * 2_000_000))
    with pytest.raises(PersistentError, match="answered more than 1,000,000 bytes"):
        await call_json(
            client, "GET", "https://sources.example/a", what="source", max_response_bytes=1_000_000
        )
