"""Wiring: what the audit projector's handlers get (where its projection lives).

The live projector writes its schema and reads the erasure and retirement ledger there;
a replay writes a fresh schema and still reads the live ledger (chorus.platform.audit_projector.replay).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from chorus.contracts.registry import SearchAttribute
from chorus.platform.audit_projector.handlers import ProjectorDeps


def bootstrap_for(
    name: str, ledger: str | None = None, search: Mapping[str, Mapping[str, SearchAttribute]] | None = None
) -> Callable[[object], AbstractAsyncContextManager[ProjectorDeps]]:
    """The bootstrap of a projector writing schema ``name`` (its ledger: ``ledger``, else
    its own), projecting the search attributes ``search`` declares."""
    deps = ProjectorDeps(schema=name, ledger=ledger or name, search=search or {})

    @asynccontextmanager
    async def bootstrap(_: object) -> AsyncIterator[ProjectorDeps]:
        yield deps

    return bootstrap
