"""Public surface (docs/runtime-api.md), kept at this path; it lives in ``chorus.testing.stack``."""

from chorus.testing.stack import (
    isolated_registry,
    isolated_schemas,
    key_store,
    provision,
    publish,
    read_events,
)
from chorus.tools.infra import use_project_infra

__all__ = [
    "isolated_registry",
    "isolated_schemas",
    "key_store",
    "provision",
    "publish",
    "read_events",
    "use_project_infra",
]
