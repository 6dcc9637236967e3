"""A deployment of its own for one test module: real processes of the dev stack, on topics
(an isolated registry) and a database nobody else uses, torn down after."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from chorus.contracts.registry import Registry
from chorus.tools.devstack import DevStack
from tests.support.database import create_database, drop_database
from tests.support.pgbouncer import PgBouncer, pgbouncer
from tests.support.registry import SCHEMAS, ensure_service_users, grant_access, isolated_registry


@dataclass(frozen=True)
class OwnStack:
    stack: DevStack
    registry: Registry
    database_url: str
    """The URL of its own database."""
    pgbouncer: PgBouncer | None = None


@asynccontextmanager
async def own_stack(
    tmp: Path,
    kafka_bootstrap: str,
    server_url: str,
    *,
    name: str,
    services: tuple[str, ...],
    env: Mapping[str, str] | None = None,
    service_env: Mapping[str, dict[str, str]] | None = None,
    releases: Mapping[str, tuple[str, ...]] | None = None,
    project: Path | None = None,
    sandbox_args: Sequence[str] = (),
    through_pgbouncer: bool = False,
) -> AsyncIterator[OwnStack]:
    """``services`` started (and stopped after) with their own registry, ACLs and database
    ``chorus_<name>_<random>`` on the server of ``server_url``; with ``project``, that
    project's services too, on a copy of its registry's union with the platform's. With
    ``through_pgbouncer``, every service's pool reaches the database through a PgBouncer in
    transaction mode (:attr:`OwnStack.pgbouncer`)."""
    suffix = uuid.uuid4().hex[:8]
    root = project / "schemas" if project is not None else SCHEMAS
    registry = await isolated_registry(tmp, suffix, kafka_bootstrap, root=root)
    if project is not None:  # its principals log in too
        await ensure_service_users(kafka_bootstrap, root)
    await grant_access(registry, kafka_bootstrap)
    database = f"chorus_{name}_{suffix}"
    url = await create_database(server_url, database)
    try:
        with pgbouncer(url) if through_pgbouncer else nullcontext() as bouncer:
            stack = DevStack(
                tmp / "logs",
                services=services,
                env={
                    "CHORUS_SCHEMAS_DIR": str(registry.root),
                    "CHORUS_KAFKA_BOOTSTRAP": kafka_bootstrap,
                    "CHORUS_DATABASE_URL": url,
                    **(env or {}),
                },
                service_env=_own_groups(dict(service_env or {}), services, suffix),
                releases=dict(releases or {}),
                project=project,
                sandbox_args=list(sandbox_args),
                database_pooler=bouncer.address if bouncer else "",
            )
            if bouncer:
                bouncer.allow(stack.database_roles)
            try:
                await stack.start()
                yield OwnStack(stack, registry, url, bouncer)
            finally:
                await stack.stop()
    finally:
        await drop_database(server_url, database)


def _own_groups(
    service_env: dict[str, dict[str, str]], services: tuple[str, ...], suffix: str
) -> dict[str, dict[str, str]]:
    """Outcome analytics in a group (and so topics and tables) of this stack's own: its
    committed group and its facts topic would otherwise be shared with every other test's
    on this broker, each replica owning some of the others' facts."""
    if "outcome_analytics" in services:
        analytics = service_env.setdefault("outcome_analytics", {})
        analytics.setdefault("CHORUS_GROUP_ID", f"outcome_analytics.s{suffix}")
    return service_env
