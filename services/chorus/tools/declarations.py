"""The declarations of the services a registry names: what each one's code handles and emits.

Each service is looked up by name (``<package>.service``, where ``service_module`` finds its
package, as ``python -m`` and ``chorus migrate`` load it), never imported statically: the
tooling depends on no service.
A module offers ``make_spec(registry=...)`` (the spec for a project's union registry: the
audit projector records the project's events too), else ``SPEC`` (a ServiceSpec), else
``EDGES`` (a service not built on the runtime). A project's services are found in the
``services/`` folder beside its registry, as ``chorus dev`` runs them.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from chorus.contracts.edges import ServiceEdges
from chorus.contracts.registry import RUNTIME_PRODUCER, Registry
from chorus.kernel.service import ServiceSpec


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


SERVICE_PACKAGES = ("chorus.platform", "chorus.reference")
"""Where Chorus's own services live: the platform's, and the reference workflows' (a
distribution of its own, which production installs leave out)."""


def service_module(name: str) -> str:
    """The package ``python -m`` runs for service ``name``: one of Chorus's own, else a
    project's service, a top-level package of its project (``services/<name>``)."""
    for package in SERVICE_PACKAGES:
        try:
            if importlib.util.find_spec(f"{package}.{name}") is not None:
                return f"{package}.{name}"
        except ModuleNotFoundError:  # the reference distribution is not installed here
            continue
    return name


def own_services() -> dict[str, Path]:
    """Chorus's own services installed here (name -> its package's folder): every package of
    ``SERVICE_PACKAGES`` with a ``service.py``."""
    found: dict[str, Path] = {}
    for package in SERVICE_PACKAGES:
        try:
            folders = importlib.import_module(package).__path__
        except ModuleNotFoundError:
            continue
        for info in pkgutil.iter_modules(folders):
            folder = Path(folders[0]) / info.name
            if (folder / "service.py").is_file():
                found[info.name] = folder
    return dict(sorted(found.items()))


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
            declared = _declared(name, importlib.import_module(f"{service_module(name)}.service"), registry)
        except Exception as exc:  # not installed here, or broken: said, and the registry stands
            missing[name] = f"{service_module(name)}.service could not be read: {type(exc).__name__}: {exc}"
            continue
        if declared is None:
            missing[name] = f"{service_module(name)}.service declares no make_spec, SPEC or EDGES"
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
