"""A Kafka client that never finishes closing does not hold a service's shutdown.

aiokafka's last step of ``stop()`` waits for every TLS connection to be gone; when the
broker's close_notify does not come the loop waits its SSL shutdown timeout (30 s), and a
service on SIGTERM was killed instead of exiting.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from chorus.kernel.kafka import stop_client


class _Client:
    def __init__(self, closes_in_s: float) -> None:
        self.closes_in_s = closes_in_s
        self.stopped = False

    async def stop(self) -> None:
        await asyncio.sleep(self.closes_in_s)
        self.stopped = True


async def test_a_client_that_closes_is_waited_for() -> None:
    client: Any = _Client(closes_in_s=0.01)
    await stop_client(client, timeout_s=5)
    assert client.stopped


async def test_a_client_whose_connections_never_close_is_left_after_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client: Any = _Client(closes_in_s=3600)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with caplog.at_level(logging.WARNING, logger="chorus.kafka"):
        await stop_client(client, timeout_s=0.2)
    assert loop.time() - started < 60  # not the hour the client would take
    assert not client.stopped
    assert "took over" in caplog.text and "_Client" in caplog.text
