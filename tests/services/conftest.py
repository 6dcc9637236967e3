"""Fixtures of the services' tests on real Kafka and PostgreSQL (tests.support.onkafka)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.onkafka import OnKafka, Outside, sandbox_served
from tests.support.registry import isolated_registry


@pytest.fixture
async def on_kafka(tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str) -> OnKafka:
    """This test's own topics, created on the shared broker."""
    registry = await isolated_registry(tmp_path, unique, kafka_bootstrap)
    return OnKafka(registry, kafka_bootstrap, database_url, unique)


@pytest.fixture
async def sandbox() -> AsyncIterator[Outside]:
    """The outside world's stand-in, for this test alone (its counters start at zero)."""
    async with sandbox_served() as outside:
        yield outside
