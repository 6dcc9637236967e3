"""Kernel tests: the record path without Kafka, on the memory store and on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from chorus.contracts.registry import Registry, load_registry
from chorus.kernel.store import Store
from chorus.kernel.store.postgres import PgStore, ServiceStore
from chorus.testing.memory import MemoryStore
from tests.support.registry import isolated_schemas


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    """The platform's registry with the test topic (no broker: nothing is created)."""
    return load_registry(isolated_schemas(tmp_path_factory.mktemp("registry"), "kernel"))


@pytest.fixture
def name() -> str:
    return f"svc_{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.integration)])
async def store(request: pytest.FixtureRequest, name: str) -> AsyncIterator[Store]:
    """The same behaviour, on either store."""
    if request.param == "memory":
        yield MemoryStore()
        return
    database_url: str = request.getfixturevalue("database_url")
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
    try:
        sql = ServiceStore(name)
        async with pool.acquire() as conn:
            await sql.migrate(conn)
        yield PgStore(sql, pool)
    finally:
        async with pool.acquire() as conn:
            await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        await pool.close()
