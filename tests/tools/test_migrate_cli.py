"""`chorus migrate` (the Helm chart's pre-install job) on a real, empty PostgreSQL: every
service's schema as its own start would leave it, and running it again changes nothing."""

from __future__ import annotations

import uuid

import pytest

from chorus.contracts.registry import default_registry
from chorus.tools.cli.migrate import migrating_services
from tests.support.database import connected, own_database
from tests.support.processes import chorus

pytestmark = pytest.mark.integration


async def test_chorus_migrate_brings_every_services_schema_up_to_date_and_again_changes_nothing(
    database_url: str,
) -> None:
    database = f"chorus_migrate_{uuid.uuid4().hex[:8]}"
    async with own_database(database_url, database) as url:
        code, out, err = await chorus("migrate", env={"CHORUS_DATABASE_URL": url})
        assert code == 0, err
        services = migrating_services(default_registry())
        assert f"migrations: {len(services)} service(s) up to date" in out
        async with connected(url) as conn:

            async def ledger() -> dict[str, list[tuple[str, int]]]:
                found = {}
                for service in services:
                    rows = await conn.fetch(
                        f'SELECT component, version FROM "{service}".schema_migrations ORDER BY 1, 2'
                    )
                    found[service] = [(r["component"], r["version"]) for r in rows]
                return found

            first = await ledger()
            # Every service has the runtime's tables at their latest version.
            for service, rows in first.items():
                runtime = [v for c, v in rows if c == "runtime"]
                assert runtime and max(runtime) >= 5, (service, rows)
                assert await conn.fetchval(
                    "SELECT count(*) FROM information_schema.columns "
                    "WHERE table_schema = $1 AND table_name = 'state' AND column_name = 'repinned_from'",
                    service,
                ), service
            # A service's own tables too (the rollout service's moves, migration 2).
            assert ("rollouts", 2) in first["rollout_service"]
            code, out, err = await chorus("migrate", env={"CHORUS_DATABASE_URL": url})
            assert code == 0, err
            assert await ledger() == first
