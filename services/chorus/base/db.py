"""PostgreSQL access: one asyncpg pool per process, identifiers, and what a data error is.

Schemas are created and changed by chorus.base.migrations (versioned, with a ledger).
"""

from __future__ import annotations

import re

import asyncpg

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def ident(name: str) -> str:
    """A safe SQL identifier (service and schema names are interpolated into DDL)."""
    if not IDENTIFIER.match(name):
        raise ValueError(f"{name!r} is not a valid SQL identifier ([a-z_][a-z0-9_]*)")
    return name


def rows_affected(status: str) -> int:
    """Rows a statement touched, from its command status (``DELETE 3`` -> 3)."""
    return int(status.rsplit(maxsplit=1)[-1])


async def _keep_session(_: asyncpg.Connection) -> None:
    """Chorus keeps no session state on pooled connections (advisory locks and LISTEN
    live on dedicated connections), so the reset round trip asyncpg does on every
    release is pure cost; an open transaction is still rolled back by asyncpg itself."""


async def create_pool(
    url: str, *, min_size: int = 1, max_size: int = 10, pool_mode: str = "session"
) -> asyncpg.Pool:
    """``pool_mode="transaction"``: behind PgBouncer in transaction mode, each transaction may
    run on another server connection, so asyncpg must not cache named prepared statements."""
    cache = {"statement_cache_size": 0} if pool_mode == "transaction" else {}
    try:
        pool = await asyncpg.create_pool(
            url, min_size=min_size, max_size=max_size, command_timeout=60, reset=_keep_session, **cache
        )
    except (OSError, asyncpg.PostgresError) as exc:
        raise ConnectionError(
            f"cannot connect to PostgreSQL at {redact(url)}: {exc}. Is it running? Try `make up`."
        ) from exc
    assert pool is not None
    return pool


# SQLSTATEs that say "this value cannot be stored", not "the database is unwell": the
# data exception class (22: untranslatable character, value too long, numeric overflow,
# invalid json ...), NOT NULL and CHECK violations, and program limits (54: an index
# row or a jsonb value over PostgreSQL's size limits).
_DATA_ERROR_STATES = frozenset({"23502", "23514"})
_DATA_ERROR_CLASSES = ("22", "54")


def is_data_error(exc: BaseException) -> bool:
    """True when PostgreSQL (or asyncpg encoding an argument) refused a *value*.

    Retrying the same write can never succeed; the record that carried the value is
    at fault, not the database. asyncpg reports its own argument-encoding failures
    (a lone surrogate, an int out of range) as ``DataError`` with SQLSTATE 22000.
    """
    if isinstance(exc, asyncpg.DataError | UnicodeEncodeError | OverflowError):
        return True
    state = getattr(exc, "sqlstate", None)
    return isinstance(state, str) and (state in _DATA_ERROR_STATES or state.startswith(_DATA_ERROR_CLASSES))


def data_error_blames_input(exc: BaseException) -> bool:
    """Whether a data error (see :func:`is_data_error`) comes from the values a record
    carried rather than from the code that stores them: a NOT NULL or CHECK violation, or
    an argument of the wrong type, is a bug that would fail for every record alike."""
    state = getattr(exc, "sqlstate", None)
    if state in _DATA_ERROR_STATES:
        return False
    message = str(exc)
    if isinstance(exc, asyncpg.DataError) and message.startswith("invalid input for query argument"):
        return "out of" in message or "codec can't encode" in message  # a range or a text: values
    return True


def redact(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
