"""``chorus migrate``: every service's schema migrated ahead of its start.

Each service migrates its own schema when it starts (``chorus.runtime.runner``: the
runtime's tables, then the service's own migrations). This runs the very same
migrations beforehand (the Helm chart's pre-install/pre-upgrade job), so a new release's
pods start on a migrated database and a migration that fails stops the deploy before any
pod is replaced. Idempotent: a migration already in the ledger is skipped.

Each service migrates as itself: its DSN from ``CHORUS_DATABASE_URL_<SERVICE>`` (e.g.
``CHORUS_DATABASE_URL_INVOICE_AGENT``, the role that owns its schema), else
``CHORUS_DATABASE_URL`` (one login for every service). The services are the registry's
runtime principals; each one's declaration (``<its package>.service.SPEC``) is looked up
by name (``service_module``), as ``python -m`` loads it.

Exit codes: 0 ok; 1 the database refused (or a migration failed); 2 usage or registry errors.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Mapping
from typing import Annotated, Any

import asyncpg
import typer

from chorus.base.db import create_pool
from chorus.base.logs import redact
from chorus.base.settings import LOCAL_DATABASE_URL
from chorus.contracts.registry import Registry
from chorus.kernel.service import ServiceSpec
from chorus.kernel.store.postgres import ServiceStore
from chorus.tools.cli.options import SchemasDir, fail, registry_of
from chorus.tools.declarations import service_module

URL_VARIABLE = "CHORUS_DATABASE_URL"


DatabaseUrl = Annotated[
    str,
    typer.Option(
        "--database-url",
        envvar=URL_VARIABLE,
        show_envvar=True,
        help=f"The DSN of a service without its own {URL_VARIABLE}_<SERVICE>.",
    ),
]
"""The DSN of the services without their own ``CHORUS_DATABASE_URL_<SERVICE>``."""


def migrating_services(registry: Registry) -> list[str]:
    """The services that keep data: the registry's runtime principals."""
    return sorted(n for n, s in registry.principals.services.items() if s.kind == "runtime")


def database_url(service: str, env: Mapping[str, str], default: str) -> str:
    """``service``'s DSN: ``CHORUS_DATABASE_URL_<SERVICE>``, else ``default``."""
    return env.get(f"{URL_VARIABLE}_{service.upper()}") or default


def service_spec(service: str) -> ServiceSpec[Any, Any]:
    """``<service>.service.SPEC``, looked up by name."""
    spec = importlib.import_module(f"{service_module(service)}.service").SPEC
    if not isinstance(spec, ServiceSpec):
        raise TypeError(f"{service}.service.SPEC is not a ServiceSpec")
    return spec


async def migrate_service(spec: ServiceSpec[Any, Any], url: str) -> None:
    """What a service's start does to its schema (ServiceRunner._start_database)."""
    pool = await create_pool(url, max_size=1)
    try:
        async with pool.acquire() as conn:
            await ServiceStore(spec.name).migrate(conn)
            for migration in spec.migrations:
                await migration(conn)
    finally:
        await pool.close()


def migrate_command(
    services: Annotated[
        list[str] | None,
        typer.Option(
            "--service",
            metavar="SERVICE",
            help="Only this service (repeatable). Default: every one that keeps data.",
        ),
    ] = None,
    database_url_option: DatabaseUrl = LOCAL_DATABASE_URL,
    schemas_dir: SchemasDir = None,
) -> None:
    """Run every service's schema migrations (the runtime's, then its own), each as its own
    role (CHORUS_DATABASE_URL_<SERVICE>, else CHORUS_DATABASE_URL). Idempotent."""
    registry = registry_of("migrate", schemas_dir)
    known = migrating_services(registry)
    chosen = services or known
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        typer.echo(
            f"chorus migrate: not a service that keeps data: {', '.join(unknown)} "
            f"(known: {', '.join(known)})",
            err=True,
        )
        raise typer.Exit(2)
    for service in chosen:
        url = database_url(service, os.environ, database_url_option)
        try:
            spec = service_spec(service)
        except (ImportError, AttributeError, TypeError) as exc:
            fail("migrate", f"cannot load {service}'s declaration: {exc}", 2)
        try:
            asyncio.run(migrate_service(spec, url))
        except (OSError, asyncpg.PostgresError) as exc:
            fail("migrate", f"{service}: {redact(str(exc))}", 1)
        typer.echo(f"migrated {service}")
    typer.echo(f"migrations: {len(chosen)} service(s) up to date")
