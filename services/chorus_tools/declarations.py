"""The declarations of the services a registry names: what each one's code handles and emits.

Each service is looked up by name (``<service>.service``, as ``python -m <service>`` and
``chorus migrate`` load it), never imported statically: the tooling depends on no service.
A module offers ``make_spec(registry=...)`` (the spec for a project's union registry: the
audit projector records the project's events too), else ``SPEC`` (a ServiceSpec), else
``EDGES`` (a service not built on the runtime). A project's services are found in the
``services/`` folder beside its registry, as ``chorus dev`` runs them.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from chorus.kernel.service import ServiceSpec
from chorus_contracts.edges import ServiceEdges
from chorus_contracts.registry import RUNTIME_PRODUCER, Registry


@dataclass(frozen=True)
class Declared:
    """One service as its code declares it."""

    name: str
    edges: ServiceEdges
    spec: ServiceSpec[Any, Any] | None
    """None for a service not built on the runtime (it declares EDGES)."""
    folder: Path
    """Its package: where its handlers, and the timers they schedule, are written."""


@dataclass(frozen=True)
class Declarations:
    services: dict[str, Declared]
    missing: dict[str, str]
    """Service name -> why its declaration could not be read (the registry stands alone there)."""


def service_names(registry: Registry) -> list[str]:
    """Every service the registry names: its principals, and each topic's producers and consumers."""
    named = set(registry.principals.services)
    for spec in registry.topics.values():
        named |= {*spec.producers, *spec.consumers}
    return sorted(named - {RUNTIME_PRODUCER})


def read_declarations(registry: Registry) -> Declarations:
    """The declaration of every service of ``registry`` that can be imported here."""
    _find_project_services(registry)
    services: dict[str, Declared] = {}
    missing: dict[str, str] = {}
    for name in service_names(registry):
        try:
            declared = _declared(name, importlib.import_module(f"{name}.service"), registry)
        except Exception as exc:  # not installed here, or broken: said, and the registry stands
            missing[name] = f"{name}.service could not be read: {type(exc).__name__}: {exc}"
            continue
        if declared is None:
            missing[name] = f"{name}.service declares no make_spec, SPEC or EDGES"
        else:
            services[name] = declared
    return Declarations(services, missing)


def _declared(name: str, module: ModuleType, registry: Registry) -> Declared | None:
    folder = Path(inspect.getfile(module)).resolve().parent
    make_spec = getattr(module, "make_spec", None)
    if callable(make_spec) and "registry" in inspect.signature(make_spec).parameters:
        spec = make_spec(registry=registry)
    else:
        spec = getattr(module, "SPEC", None)
    if isinstance(spec, ServiceSpec):
        return Declared(name, spec.edges(), spec, folder)
    edges = getattr(module, "EDGES", None)
    if isinstance(edges, ServiceEdges):
        return Declared(name, edges, None, folder)
    return None


def _find_project_services(registry: Registry) -> None:
    """A project's services are importable from its ``services/`` (as its contracts are)."""
    if registry.project is None:
        return
    root = registry.root.resolve()
    folder = Path(registry.project.contracts_path or root.parent / "services")
    if folder.is_dir() and str(folder) not in sys.path:
        sys.path.append(str(folder))
