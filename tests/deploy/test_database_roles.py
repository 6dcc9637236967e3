"""PostgreSQL least privilege on the real server: each service its own role, owning its
schema and nothing else; passwords on TCP; no superuser at run time (chorus.tools.dbroles)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from chorus.kernel.store.postgres import ServiceStore
from chorus.reference.budget_agent.adapters.ledger import migrate as migrate_budget_tables
from chorus.tools.access import local_passwords
from chorus.tools.dbroles import provision_database, role_url
from tests.support.database import connected, own_database

pytestmark = pytest.mark.integration

SERVICES = ("budget_agent", "invoice_agent", "payment_agent")


@pytest.fixture
async def fresh(database_url: str) -> AsyncIterator[tuple[str, dict[str, str]]]:
    """A new database provisioned for three services; (admin URL, passwords)."""
    name = f"chorus_roles_{uuid.uuid4().hex[:8]}"
    passwords = local_passwords(Path(os.environ["CHORUS_KAFKA_USERS_DIR"]), SERVICES)
    async with own_database(database_url, name) as admin:
        yield admin, passwords


async def test_each_service_migrates_and_uses_its_own_schema_and_cannot_touch_anothers(
    fresh: tuple[str, dict[str, str]],
) -> None:
    admin, passwords = fresh
    # A table an earlier run made as the superuser in a service's schema is handed over.
    async with connected(admin) as conn:
        await conn.execute("CREATE SCHEMA payment_agent")
        await conn.execute("CREATE TABLE payment_agent.left_over (id bigserial PRIMARY KEY)")
    first = await provision_database(admin, passwords)
    assert first.handed_over["payment_agent"] == 1
    again = await provision_database(admin, passwords)  # idempotent
    assert again.handed_over == dict.fromkeys(SERVICES, 0)

    budget = await asyncpg.connect(role_url(admin, "budget_agent", passwords["budget_agent"]))
    invoice = await asyncpg.connect(role_url(admin, "invoice_agent", passwords["invoice_agent"]))
    payment = await asyncpg.connect(role_url(admin, "payment_agent", passwords["payment_agent"]))
    try:
        # Migrations run as the owner role: the runtime's tables and the service's own.
        await ServiceStore("budget_agent").migrate(budget)
        await migrate_budget_tables(budget)
        await ServiceStore("invoice_agent").migrate(invoice)
        owners = await budget.fetch(
            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'budget_agent'"
        )
        assert [r["tableowner"] for r in owners] == ["budget_agent"]
        assert await payment.fetchval("SELECT count(*) FROM payment_agent.left_over") == 0

        assert await invoice.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False
        # Another service's rows: neither read, nor written, nor added to.
        for statement in (
            "SELECT count(*) FROM budget_agent.state",
            "DELETE FROM budget_agent.inbox",
            "CREATE TABLE budget_agent.planted (x int)",
            # nor the shared functions every service's indexes use
            "CREATE OR REPLACE FUNCTION chorus.subject_hash(ref text) RETURNS text "
            "LANGUAGE sql AS $$ SELECT '' $$",
            "CREATE ROLE mallory LOGIN",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await invoice.execute(statement)
        # The shared buckets (the LLM's rate) are usable by every service.
        await invoice.execute(
            """INSERT INTO chorus.rate_limits VALUES ('roles-test', 1, 1, 1, now())
               ON CONFLICT (name) DO UPDATE SET tokens = 1"""
        )
    finally:
        for conn in (budget, invoice, payment):
            await conn.close()


async def test_a_role_logs_in_over_tcp_only_with_its_password(fresh: tuple[str, dict[str, str]]) -> None:
    admin, passwords = fresh
    await provision_database(admin, passwords)
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(role_url(admin, "invoice_agent", "guessed"))
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(role_url(admin, "invoice_agent", passwords["budget_agent"]))
    async with connected(role_url(admin, "invoice_agent", passwords["invoice_agent"])) as conn:
        assert await conn.fetchval("SELECT current_user") == "invoice_agent"
