"""Schemas change by versioned migrations recorded in a ledger, never by editing one."""

from __future__ import annotations

import asyncpg
import pytest

from chorus.base.migrations import Migration, MigrationEditedError, migrate

pytestmark = pytest.mark.integration


async def test_versions_run_once_in_order_and_an_edited_one_stops_the_start(
    pg: asyncpg.Connection, unique: str
) -> None:
    schema = f"mig_{unique}"
    v1 = Migration(1, "notes", (f"CREATE TABLE {schema}.notes (id int PRIMARY KEY)",))
    v2 = Migration(2, "note text", (f"ALTER TABLE {schema}.notes ADD COLUMN text text NOT NULL DEFAULT ''",))
    try:
        assert await migrate(pg, schema=schema, component="notes", migrations=[v1]) == [1]
        assert await migrate(pg, schema=schema, component="notes", migrations=[v1]) == []  # a restart
        assert await migrate(pg, schema=schema, component="notes", migrations=[v2, v1]) == [2]
        columns = await pg.fetch(
            """SELECT column_name FROM information_schema.columns
               WHERE table_schema = $1 AND table_name = 'notes' ORDER BY 1""",
            schema,
        )
        assert [c["column_name"] for c in columns] == ["id", "text"]
        ledger = await pg.fetch(f"SELECT component, version, name FROM {schema}.schema_migrations ORDER BY 2")
        assert [tuple(r) for r in ledger] == [("notes", 1, "notes"), ("notes", 2, "note text")]

        edited = Migration(1, "notes", (f"CREATE TABLE {schema}.notes (id bigint PRIMARY KEY)",))
        with pytest.raises(MigrationEditedError, match=r"notes v1 .* was edited after it ran here"):
            await migrate(pg, schema=schema, component="notes", migrations=[edited, v2])
        # Another component in the same schema keeps its own versions.
        other = Migration(1, "tags", (f"CREATE TABLE {schema}.tags (id int)",))
        assert await migrate(pg, schema=schema, component="tags", migrations=[other]) == [1]
    finally:
        await pg.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
