"""The key service's declaration: no handlers; its API, its table, and how erasure and
retention reach that table."""

from __future__ import annotations

from typing import Any

from chorus.kernel.service import ServiceSpec
from key_service.adapters.keys import KeyShredding, migrate
from key_service.bootstrap import Deps, bootstrap
from key_service.handlers import HANDLERS
from key_service.server import serve_keys

VERSION = "0.1.0"

SPEC: ServiceSpec[Any, Deps] = ServiceSpec(
    name="key_service",
    version=VERSION,
    handlers=HANDLERS,
    migrations=[migrate],
    owned_data=[KeyShredding()],
    bootstrap=bootstrap,
    workers=[serve_keys],
)
