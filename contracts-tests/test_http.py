"""The registry's HTTP edges (schemas/http.yaml) are true to the services, as the topic files
are to their handlers: every endpoint is a service with an HTTP API and published models,
every caller holds the URL in the declared setting, and every setting of a service that holds
another service's URL is a declared edge.

A setting holds another service's URL when it is named as some endpoint's setting, or when
its default is that service's address on this machine (its settings' ``http_port``, or the
gateway's ``api_port``): how every service has named the API it calls so far.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from pydantic_settings import BaseSettings

from chorus.contracts.api.base import ApiModel
from chorus.tools.chart import settings_class
from chorus.tools.declarations import own_services
from chorus.tools.devstack import REFERENCE_PROJECT, project_services
from chorus.tools.httpedges import Edge, HttpEdges, load_http_edges

ROOT = Path(__file__).resolve().parents[1]
PLATFORM = sorted(own_services())
if str(REFERENCE_PROJECT / "services") not in sys.path:
    sys.path.append(str(REFERENCE_PROJECT / "services"))
PROJECT = project_services(REFERENCE_PROJECT)
REGISTRIES = {"platform": (ROOT / "schemas", PLATFORM), "support": (REFERENCE_PROJECT / "schemas", PROJECT)}
EDGES = load_http_edges(ROOT / "schemas")
LOOPBACK = ("127.0.0.1", "localhost")


def settings_of(services: list[str]) -> dict[str, type[BaseSettings]]:
    return {name: settings_class(name) for name in services}


def addresses(settings: Mapping[str, type[BaseSettings]]) -> dict[int, str]:
    """Port -> the service answering there on this machine (its settings' defaults)."""
    found = {}
    for name, cls in settings.items():
        for port in ("http_port", "api_port"):
            if port in cls.model_fields:
                found[int(cls.model_fields[port].default)] = name
    return found


def url_target(setting: str, default: object, edges: HttpEdges, ports: Mapping[int, str]) -> str | None:
    """The service whose URL ``setting`` holds, if any (by its name, else its default)."""
    named = [name for name, endpoint in edges.endpoints.items() if endpoint.setting == setting]
    if named:
        return named[0]
    if isinstance(default, str):
        parts = urlsplit(default)
        if parts.hostname in LOOPBACK and parts.port is not None and parts.port in ports:
            return ports[parts.port]
    return None


def undeclared(edges: HttpEdges, settings: Mapping[str, type[BaseSettings]]) -> list[str]:
    """Every ``*_url`` setting holding another service's URL without an edge declaring it."""
    ports = addresses(settings)
    problems = []
    for service, cls in sorted(settings.items()):
        declared = {e.endpoint.setting: e.target for e in edges.of(service)}
        for name, field in cls.model_fields.items():
            if not name.endswith("_url"):
                continue
            target = url_target(name, field.default, edges, ports)
            if target is not None and target != service and declared.get(name) != target:
                problems.append(
                    f"{service}.{name} holds {target}'s URL: declare the edge in schemas/http.yaml"
                )
    return sorted(problems)


@pytest.mark.checkout
@pytest.mark.parametrize("registry", sorted(REGISTRIES))
def test_every_setting_holding_another_services_url_is_a_declared_edge(registry: str) -> None:
    root, services = REGISTRIES[registry]
    everyone = settings_of(sorted({*PLATFORM, *services}))
    assert undeclared(load_http_edges(root), everyone) == []


@pytest.mark.parametrize("name", sorted(EDGES.endpoints))
def test_every_endpoint_is_a_service_serving_what_it_is_declared_to(name: str) -> None:
    assert name in PLATFORM, f"schemas/http.yaml: {name} is no service"
    endpoint = EDGES.endpoints[name]
    fields = settings_class(name).model_fields
    assert ("api_port" if endpoint.port == "api" else "http_port") in fields
    if endpoint.kind == "api":
        # An API of Chorus authenticates its callers (chorus.web.apikeys) and publishes its models.
        assert "api_keys" in fields, f"{name} serves no API (its settings take no API keys)"
        module = importlib.import_module(endpoint.models or f"chorus.contracts.api.{name}")
        published = [
            m
            for _, m in inspect.getmembers(module, inspect.isclass)
            if issubclass(m, ApiModel) and m is not ApiModel
        ]
        assert published, f"{module.__name__} publishes no request or answer model of {name}"


@pytest.mark.parametrize("edge", EDGES.edges, ids=lambda e: f"{e.caller}->{e.target}")
def test_every_caller_is_a_service_holding_the_url_in_the_declared_setting(edge: Edge) -> None:
    assert edge.caller in PLATFORM, f"schemas/http.yaml: {edge.caller} is no service"
    assert edge.endpoint.setting in settings_class(edge.caller).model_fields, (
        f"{edge.caller} has no setting {edge.endpoint.setting} for {edge.target}'s URL"
    )


def test_a_url_setting_of_another_service_nobody_declared_is_named() -> None:
    """Negative control: a setting whose default is the rollout service's address, and one
    named as the audit projector's endpoint, in a service that declares neither."""

    class Console(settings_class("console")):  # type: ignore[misc]
        rollouts_url: str = "http://127.0.0.1:8121"
        audit_url: str = "http://audit.example"
        payment_api_url: str = "http://127.0.0.1:9400"  # the outside world (the sandbox)

    settings = {**settings_of(PLATFORM), "console": Console}
    assert undeclared(EDGES, settings) == [
        "console.audit_url holds audit_projector's URL: declare the edge in schemas/http.yaml",
        "console.rollouts_url holds rollout_service's URL: declare the edge in schemas/http.yaml",
    ]


def test_the_loader_refuses_edges_to_what_is_not_declared(tmp_path: Path) -> None:
    (tmp_path / "topics").mkdir()
    cases = {
        "endpoints: {}\ncalls: {console: [gateway]}\n": "declares no endpoint",
        "endpoints: {console: {setting: console_url, kind: site}}\ncalls: {notifier: [console]}\n": "a site",
        "endpoints: {gateway: {setting: gateway}}\n": "gateway",
        "endpoints: {a: {setting: x_url}, b: {setting: x_url}}\ncalls: {c: [a, b]}\n": "one setting for two",
    }
    for text, refusal in cases.items():
        (tmp_path / "http.yaml").write_text(text)
        with pytest.raises(ValueError, match=refusal):
            load_http_edges(tmp_path)


def test_a_project_adds_edges_and_never_redefines_the_platforms(tmp_path: Path) -> None:
    project = tmp_path / "schemas"
    project.mkdir()
    (project / "project.yaml").write_text("name: demo\n")
    (project / "http.yaml").write_text(
        "endpoints: {crm_bridge: {setting: crm_bridge_url}}\ncalls: {triage: [crm_bridge, gateway]}\n"
    )
    edges = load_http_edges(project)
    assert {(e.caller, e.target) for e in edges.of("triage")} == {
        ("triage", "crm_bridge"),
        ("triage", "gateway"),
    }
    assert edges.of("gateway") == EDGES.of("gateway")
    (project / "http.yaml").write_text("endpoints: {gateway: {setting: gateway_url}}\n")
    with pytest.raises(ValueError, match="declares \\['gateway'\\] already"):
        load_http_edges(project)
    (project / "http.yaml").write_text("calls: {gateway: [gateway]}\n")
    with pytest.raises(ValueError, match="platform's to say"):
        load_http_edges(project)
