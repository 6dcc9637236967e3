"""Which service calls which service's HTTP API: ``http.yaml`` of the registry.

The topic files say who produces and who consumes each event; ``schemas/http.yaml`` says
who calls whose API, and who only hands people links to another service's pages. The dev
stack, docker-compose.yml (``python -m chorus.tools.compose``) and the Helm chart
(``python -m chorus.tools.chart``: each caller's URL settings and network policies) are
derived from it; a contracts test keeps it true to the services' settings.

A project's registry may have an ``http.yaml`` of its own: its endpoints and its services'
calls join the platform's, never redefining one (the platform's services do not change what
they call for a project).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from chorus.contracts.registry import platform_schemas_dir, read_project

HTTP_FILE = "http.yaml"
ENV_PREFIX = "CHORUS_"


class Endpoint(BaseModel):
    """A service other services reach by URL, and the setting each of them holds it in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    setting: str = Field(pattern=r"^[a-z][a-z0-9_]*_url$", description="the callers' setting of its URL")
    port: Literal["http", "api"] = Field(
        default="http", description="http: its /health, /metrics and API port; api: its public API's port"
    )
    kind: Literal["api", "site"] = Field(
        default="api", description="api: services call it; site: pages for people, only linked to"
    )
    models: str | None = Field(
        default=None,
        description="the module of its request and answer models (default chorus.contracts.api.<it>)",
    )

    @property
    def variable(self) -> str:
        """The environment variable of the setting: ``CHORUS_<SETTING>``."""
        return ENV_PREFIX + self.setting.upper()


class HttpFile(BaseModel):
    """One ``http.yaml``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoints: dict[str, Endpoint] = Field(default_factory=dict)
    calls: dict[str, list[str]] = Field(default_factory=dict, description="caller -> the APIs it calls")
    links: dict[str, list[str]] = Field(
        default_factory=dict, description="service -> the sites it hands people links to"
    )


@dataclass(frozen=True)
class Edge:
    """``caller`` reaches ``target`` by URL: it calls its API, or (``link``) only hands
    people links to it (the target's public address)."""

    caller: str
    target: str
    endpoint: Endpoint
    link: bool = False

    @property
    def variable(self) -> str:
        return self.endpoint.variable


@dataclass(frozen=True)
class HttpEdges:
    endpoints: dict[str, Endpoint]
    edges: tuple[Edge, ...]

    def of(self, caller: str) -> list[Edge]:
        """What ``caller`` reaches by URL, calls first, each by its target's name."""
        return sorted((e for e in self.edges if e.caller == caller), key=lambda e: (e.link, e.target))

    def callers_of(self, target: str) -> list[str]:
        return sorted({e.caller for e in self.edges if e.target == target and not e.link})

    def env(self, caller: str, address: Callable[[Edge], str | None]) -> dict[str, str]:
        """``CHORUS_<SETTING>`` -> URL of everything ``caller`` reaches, at ``address(edge)``
        (None: not reachable in this deployment, left to the setting's default)."""
        found = {e.variable: address(e) for e in self.of(caller)}
        return {variable: url for variable, url in found.items() if url is not None}


def read_http_file(root: Path) -> HttpFile:
    """``root/http.yaml`` (empty when ``root`` has none)."""
    path = root / HTTP_FILE
    if not path.is_file():
        return HttpFile()
    try:
        return HttpFile.model_validate(yaml.safe_load(path.read_text()) or {})
    except Exception as exc:
        raise ValueError(f"{path}: {exc}") from exc


def _edges(declared: HttpFile, where: Path) -> HttpEdges:
    edges: list[Edge] = []
    for caller, targets, link in (
        *((c, t, False) for c, t in declared.calls.items()),
        *((c, t, True) for c, t in declared.links.items()),
    ):
        for target in targets:
            endpoint = declared.endpoints.get(target)
            if endpoint is None:
                raise ValueError(f"{where}: {caller} reaches {target}, which declares no endpoint")
            if not link and endpoint.kind != "api":
                raise ValueError(f"{where}: {caller} calls {target}, a site (link to it instead)")
            edges.append(Edge(caller, target, endpoint, link))
    settings = [(e.caller, e.endpoint.setting) for e in edges]
    twice = sorted({s for s in settings if settings.count(s) > 1})
    if twice:
        raise ValueError(f"{where}: one setting for two targets: {twice}")
    return HttpEdges(dict(declared.endpoints), tuple(edges))


def _extend(platform: HttpFile, own: HttpFile, root: Path) -> HttpFile:
    """The platform's edges with a project's on top: it adds, never redefines."""
    clash = sorted(platform.endpoints.keys() & own.endpoints.keys())
    if clash:
        raise ValueError(f"{root / HTTP_FILE}: the platform's http.yaml declares {clash} already")
    theirs = sorted((platform.calls.keys() | platform.links.keys()) & (own.calls.keys() | own.links.keys()))
    if theirs:
        raise ValueError(f"{root / HTTP_FILE}: what the platform's {theirs} call is the platform's to say")
    return HttpFile(
        endpoints={**platform.endpoints, **own.endpoints},
        calls={**platform.calls, **own.calls},
        links={**platform.links, **own.links},
    )


def load_http_edges(root: Path | None = None) -> HttpEdges:
    """The HTTP edges of the registry at ``root``: the platform's (shipped in the package),
    with a project's own when ``root`` is a project's registry extending the platform."""
    platform = platform_schemas_dir()
    if root is None or root.resolve() == platform.resolve():
        return _edges(read_http_file(platform), platform / HTTP_FILE)
    project = read_project(root)
    if project is None:  # a complete registry of its own (a test's copy)
        return _edges(read_http_file(root), root / HTTP_FILE)
    declared = read_http_file(root)
    if project.extends == "platform":
        declared = _extend(read_http_file(platform), declared, root)
    return _edges(declared, root / HTTP_FILE)
