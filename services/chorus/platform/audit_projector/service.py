"""The audit projector's declaration: every workflow event in, projection rows out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from chorus import __version__
from chorus.contracts.lifecycle import WorkflowAttentionNeeded, WorkflowEnded
from chorus.contracts.platform import DataRemoved, SubjectErasureRequested, WorkflowsRetired
from chorus.contracts.registry import Registry, default_registry
from chorus.kernel.service import On, ServiceSpec
from chorus.platform.audit_projector.adapters.projection import SCHEMA, migrate_projection
from chorus.platform.audit_projector.api import routes
from chorus.platform.audit_projector.attention import alert_parked_workflows
from chorus.platform.audit_projector.bootstrap import bootstrap_for
from chorus.platform.audit_projector.handlers import (
    PROJECTED,
    ProjectorDeps,
    on_data_removed,
    on_reset,
    on_workflow_event,
    projected,
    search_of,
)
from chorus.platform.audit_projector.janitor import expire_workflows

VERSION = __version__  # the release of Chorus it ships in


def make_spec(name: str = SCHEMA, registry: Registry | None = None) -> ServiceSpec[Any, ProjectorDeps]:
    """The projector under ``name``: its schema, group and producer name (tests use a
    unique one so that they never share a projection); ``registry`` a project's, whose
    events it records too."""
    bootstrap = bootstrap_for(name, search=search_of(registry or default_registry()))

    async def migrate(conn: asyncpg.Connection) -> None:
        await migrate_projection(conn, name, ledger=True)

    migrations: list[Callable[[asyncpg.Connection], Awaitable[None]]] = [migrate]
    return ServiceSpec(
        name=name,
        version=VERSION,
        handlers=[
            *(
                On(model, on_workflow_event, timeout_s=30)
                for model in (projected(registry) if registry else PROJECTED)
            ),
            On(DataRemoved, on_data_removed, timeout_s=30),
        ],
        # Erasure and retention requests: every service's runtime answers them; the alert of
        # a workflow parked too long.
        produces=frozenset(
            {
                SubjectErasureRequested.event_type,
                WorkflowsRetired.event_type,
                WorkflowAttentionNeeded.event_type,
                WorkflowEnded.event_type,  # ``erased``: its subject's data was erased while it ran
            }
        ),
        bootstrap=bootstrap,
        migrations=migrations,
        workers=[expire_workflows, alert_parked_workflows],
        http_routes=routes,
        on_reset=on_reset,
    )


SPEC = make_spec()
