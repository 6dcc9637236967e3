"""PostgreSQL access: one asyncpg pool per process and idempotent DDL.

DDL runs under a transaction-scoped advisory lock so that replicas starting at
the same moment do not race on CREATE TABLE IF NOT EXISTS (which is not
concurrency-safe in PostgreSQL).
"""

from __future__ import annotations

import re
import zlib

import asyncpg

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def ident(name: str) -> str:
    """A safe SQL identifier (service and schema names are interpolated into DDL)."""
    if not IDENTIFIER.match(name):
        raise ValueError(f"{name!r} is not a valid SQL identifier ([a-z_][a-z0-9_]*)")
    return name


async def _keep_session(_: asyncpg.Connection) -> None:
    """Chorus keeps no session state on pooled connections (advisory locks and LISTEN
    live on dedicated connections), so the reset round trip asyncpg does on every
    release is pure cost; an open transaction is still rolled back by asyncpg itself."""


async def create_pool(url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    try:
        pool = await asyncpg.create_pool(
            url, min_size=min_size, max_size=max_size, command_timeout=60, reset=_keep_session
        )
    except (OSError, asyncpg.PostgresError) as exc:
        raise ConnectionError(
            f"cannot connect to PostgreSQL at {redact(url)}: {exc}. Is it running? Try `make up`."
        ) from exc
    assert pool is not None
    return pool


def redact(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


async def apply_ddl(conn: asyncpg.Connection, lock_name: str, statements: list[str]) -> None:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", zlib.crc32(lock_name.encode()))
        for statement in statements:
            await conn.execute(statement)
