"""Fresh databases on the test PostgreSQL server.

Tests that run whole services use one of their own: service schemas (budgets, timers,
approval state) otherwise carry over from earlier runs, `make demo` and other tests,
and a result would depend on history (a budget spent by last week's runs).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg


def database_url(server_url: str, database: str) -> str:
    """``server_url`` pointed at ``database`` on the same server."""
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{database}"))


async def create_database(server_url: str, database: str) -> str:
    """A new, empty database on the server of ``server_url``; returns its URL."""
    await _on_server(server_url, f'CREATE DATABASE "{database}"')
    return database_url(server_url, database)


@asynccontextmanager
async def connected(url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own to ``url`` while the block runs, closed after."""
    conn = await asyncpg.connect(url)
    try:
        yield conn
    finally:
        await conn.close()


@asynccontextmanager
async def own_database(server_url: str, database: str) -> AsyncIterator[str]:
    """A new, empty database ``database`` while the block runs (its URL), dropped after."""
    url = await create_database(server_url, database)
    try:
        yield url
    finally:
        await drop_database(server_url, database)


async def drop_database(server_url: str, database: str) -> None:
    await _on_server(server_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


async def _on_server(server_url: str, statement: str) -> None:
    # CREATE/DROP DATABASE cannot run inside a transaction (nor a pooled one): a connection of its own.
    async with connected(server_url) as conn:
        await conn.execute(statement)
