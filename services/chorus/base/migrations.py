"""Versioned, checksummed schema migrations, with a ledger in each schema.

Every set of tables (a component: the runtime's inbox/state/outbox/parked, a service's
own tables, a projection) is created and changed by numbered migrations. Each schema
keeps a ``schema_migrations`` ledger: which versions of which component ran, with a
checksum of their statements. At start a service applies the versions it has that the
ledger lacks, in order, all in one transaction under an advisory lock (replicas start
together), and refuses to start when a version that already ran was edited since:
change a schema by adding a version, never by editing one.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from chorus.base.db import ident


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]

    @property
    def checksum(self) -> str:
        return hashlib.sha256("\n;\n".join(self.statements).encode()).hexdigest()


class MigrationEditedError(RuntimeError):
    """A migration that already ran in this database was changed afterwards."""


def baseline(statements: Sequence[str]) -> list[Migration]:
    """Version 1 of a component whose tables existed before the ledger did: its statements
    are idempotent (IF NOT EXISTS), so a database that has the tables records it as run."""
    return [Migration(1, "baseline", tuple(statements))]


async def migrate(
    conn: asyncpg.Connection, *, schema: str, component: str, migrations: Sequence[Migration]
) -> list[int]:
    """Apply the migrations of ``component`` the ledger of ``schema`` lacks; the versions
    applied now. Raises MigrationEditedError naming a version whose checksum changed."""
    s = ident(schema)
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise ValueError(f"{component}: two migrations share a version: {sorted(versions)}")
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock($1)", zlib.crc32(f"chorus-migrate-{schema}".encode())
        )
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
                  component text NOT NULL,
                  version int NOT NULL,
                  name text NOT NULL,
                  checksum text NOT NULL,
                  applied_at timestamptz NOT NULL DEFAULT now(),
                  PRIMARY KEY (component, version))"""
        )
        rows = await conn.fetch(
            f"SELECT version, checksum FROM {s}.schema_migrations WHERE component = $1", component
        )
        ran = {r["version"]: r["checksum"] for r in rows}
        for migration in sorted(migrations, key=lambda m: m.version):
            if migration.version in ran:
                if ran[migration.version] != migration.checksum:
                    raise MigrationEditedError(
                        f"{schema}: migration {component} v{migration.version} ({migration.name}) was "
                        "edited after it ran here; add a new version instead"
                    )
                continue
            for statement in migration.statements:
                await conn.execute(statement)
            await conn.execute(
                f"""INSERT INTO {s}.schema_migrations (component, version, name, checksum)
                    VALUES ($1, $2, $3, $4)""",
                component,
                migration.version,
                migration.name,
                migration.checksum,
            )
            applied_now.append(migration.version)
    return applied_now
