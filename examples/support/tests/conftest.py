"""Where the integration tests find Kafka and PostgreSQL: ``CHORUS_KAFKA_BOOTSTRAP`` and
``CHORUS_DATABASE_URL`` (and ``CHORUS_KAFKA_SASL_*`` for a broker that wants a login), as
every Chorus service reads them; those of ``chorus dev infra up`` when the project started
its own (a variable set in the environment wins). An unreachable broker or database fails a
test; it is never skipped."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from chorus.runtime.runner import ServiceSettings
from chorus.teststack import key_store as platform_key_store
from chorus.teststack import use_project_infra

use_project_infra(Path(__file__).resolve().parent)


@pytest.fixture(scope="session")
def bootstrap() -> str:
    return ServiceSettings().kafka_bootstrap


@pytest.fixture
def unique() -> str:
    """A short suffix of this test's own: its topics and consumer group are its alone."""
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
async def key_store() -> AsyncIterator[str]:
    """The platform's key service for the integration tests: personal data an event carries
    (who ended a workflow, a dead letter's record) is sealed as in production."""
    async with platform_key_store() as url:
        yield url
