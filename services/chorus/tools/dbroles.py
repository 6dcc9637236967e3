"""PostgreSQL least privilege: one login role per service, owning its own schema.

Run as an admin (the cluster's superuser, or a role with CREATEROLE that owns the
database) against the database the services will use. Idempotent; for each service:

- a login role of its name (NOSUPERUSER NOCREATEDB NOCREATEROLE), password from the
  caller (the local stack reuses each principal's Kafka password file);
- CONNECT and CREATE on the database: its migrations run ``CREATE SCHEMA IF NOT EXISTS``,
  which PostgreSQL checks for CREATE on the database even when the schema exists, and
  the audit projector's replays make schemas of their own;
- its schema, owned by it with everything in it (a schema an earlier superuser-run made
  is handed over): it migrates its own tables, and nobody else's;
- schema ``chorus`` (what every service shares: two functions, the migrations ledger,
  the shared rate-limit buckets), made here by the admin; services may use it (USAGE,
  CREATE for their ledger check, read and add ledger rows, take rate-limit tokens), and
  cannot replace its functions (the admin owns them).

What a role cannot do: read or write another service's schema, create roles or
databases, or bypass row security. The gateway's key reads the audit projection over
its HTTP API, never its tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

from chorus.base.db import ident
from chorus.kernel.store.postgres import migrate_shared
from chorus.outside.breaker import migrate_breakers
from chorus.outside.ratelimit import migrate_rate_limits

_RELATIONS = {"r": "TABLE", "p": "TABLE", "v": "VIEW", "m": "MATERIALIZED VIEW", "S": "SEQUENCE"}


@dataclass
class Provisioned:
    created: list[str] = field(default_factory=list)
    handed_over: dict[str, int] = field(default_factory=dict)
    """service -> objects of its schema whose owner changed to it (earlier superuser runs)."""


async def provision_database(admin_url: str, passwords: Mapping[str, str]) -> Provisioned:
    """Roles, schemas and grants for ``passwords``' services on the database of
    ``admin_url`` (see the module's docstring)."""
    done = Provisioned()
    conn = await asyncpg.connect(admin_url)
    try:
        database = await conn.fetchval("SELECT current_database()")
        await migrate_shared(conn)
        await migrate_rate_limits(conn)
        await migrate_breakers(conn)
        for service, password in sorted(passwords.items()):
            role = ident(service)
            async with conn.transaction():
                # Roles are the cluster's: two provisioners at once must not both create one.
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext('chorus-roles'))")
                exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", service)
                verb = "ALTER" if exists else "CREATE"
                literal = await conn.fetchval("SELECT quote_literal($1)", password)
                await conn.execute(
                    f"{verb} ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS "
                    f"PASSWORD {literal}"
                )
                if not exists:
                    done.created.append(service)
                await conn.execute(f"GRANT CONNECT, CREATE ON DATABASE {ident(database)} TO {role}")
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {role} AUTHORIZATION {role}")
                await conn.execute(f"ALTER SCHEMA {role} OWNER TO {role}")
                done.handed_over[service] = await _hand_over(conn, service)
                await conn.execute(f"GRANT USAGE, CREATE ON SCHEMA chorus TO {role}")
                await conn.execute(f"GRANT SELECT, INSERT ON chorus.schema_migrations TO {role}")
                await conn.execute(f"GRANT SELECT, INSERT, UPDATE ON chorus.rate_limits TO {role}")
                await conn.execute(f"GRANT SELECT, INSERT, UPDATE ON chorus.circuit_breakers TO {role}")
    finally:
        await conn.close()
    return done


async def _hand_over(conn: asyncpg.Connection, service: str) -> int:
    """Make ``service`` the owner of every table, view and free-standing sequence in its
    schema (a sequence a column owns moves with its table)."""
    rows = await conn.fetch(
        """SELECT c.relname, c.relkind::text AS relkind FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
              AND pg_get_userbyid(c.relowner) <> $1
              AND NOT (c.relkind = 'S' AND EXISTS (
                    SELECT 1 FROM pg_depend d
                     WHERE d.objid = c.oid AND d.classid = 'pg_class'::regclass
                       AND d.deptype IN ('a', 'i')))""",
        service,
    )
    for row in rows:
        kind = _RELATIONS[row["relkind"]]
        await conn.execute(f"ALTER {kind} {ident(service)}.{ident(row['relname'])} OWNER TO {ident(service)}")
    return len(rows)


def role_url(admin_url: str, service: str, password: str) -> str:
    """``admin_url`` (same server and database) logging in as ``service``."""
    parts = urlsplit(admin_url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(service, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))
