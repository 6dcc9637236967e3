"""Wiring: the key service's dependency is how it wraps data keys (the regions' master
keys from configuration; a cloud KMS would be built here instead)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from chorus.platform.key_service.config import Settings
from chorus.platform.key_service.domain import KeyWrapping, MasterKeys


@dataclass(frozen=True)
class Deps:
    wrapping: KeyWrapping


@asynccontextmanager
async def bootstrap(settings: Settings) -> AsyncIterator[Deps]:
    yield Deps(wrapping=MasterKeys.from_settings(settings.master_keys))
