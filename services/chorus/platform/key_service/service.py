"""The key service's declaration: no handlers; its API, its table, and how erasure and
retention reach that table."""

from __future__ import annotations

from typing import Any

from chorus import __version__
from chorus.kernel.service import ServiceSpec
from chorus.platform.key_service.adapters.keys import KeyShredding, migrate
from chorus.platform.key_service.bootstrap import Deps, bootstrap
from chorus.platform.key_service.handlers import HANDLERS
from chorus.platform.key_service.server import serve_keys

VERSION = __version__  # the release of Chorus it ships in

SPEC: ServiceSpec[Any, Deps] = ServiceSpec(
    name="key_service",
    version=VERSION,
    handlers=HANDLERS,
    migrations=[migrate],
    owned_data=[KeyShredding()],
    bootstrap=bootstrap,
    workers=[serve_keys],
)
