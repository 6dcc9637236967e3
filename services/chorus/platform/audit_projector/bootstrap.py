"""Wiring: what the audit projector's handlers get (where its projection lives).

The live projector writes its schema and reads the erasure and retirement ledger there;
a replay writes a fresh schema and still reads the live ledger (chorus.platform.audit_projector.replay).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from chorus.platform.audit_projector.handlers import ProjectorDeps


def bootstrap_for(
    name: str, ledger: str | None = None
) -> Callable[[object], AbstractAsyncContextManager[ProjectorDeps]]:
    """The bootstrap of a projector writing schema ``name`` (its ledger: ``ledger``, else
    its own)."""
    deps = ProjectorDeps(schema=name, ledger=ledger or name)

    @asynccontextmanager
    async def bootstrap(_: object) -> AsyncIterator[ProjectorDeps]:
        yield deps

    return bootstrap
