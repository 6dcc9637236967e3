"""Every declared HTTP edge (schemas/http.yaml) reaches its target wherever Chorus runs: the
dev stack, docker-compose.yml and the Helm chart each hand the caller the target's address
in the declared setting, and nothing else hands out a URL of a Chorus service."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from chorus.contracts.registry import load_registry
from chorus.tools import chart, compose
from chorus.tools.devstack import DOCUMENTED_PORTS, REFERENCE_PROJECT, SERVICES, DevStack
from chorus.tools.httpedges import load_http_edges

ROOT = Path(__file__).resolve().parents[2]
EDGES = load_http_edges()
EVERY = (*SERVICES, "outcome_analytics", "console")


def stack(tmp_path: Path, **more: Any) -> DevStack:
    return DevStack(tmp_path, services=EVERY, env={"CHORUS_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}, **more)


def test_the_dev_stack_points_each_caller_at_the_process_it_calls(tmp_path: Path) -> None:
    dev = stack(tmp_path / "platform")
    assert EDGES.edges
    for edge in EDGES.edges:
        url = dev.procs[edge.caller].env[edge.variable]
        if edge.endpoint.port == "api":
            assert url == dev.api_url, edge
            assert dev.procs[edge.target].env["CHORUS_API_PORT"] == str(dev.api_port), edge
        else:
            assert urlsplit(url).port == int(dev.procs[edge.target].env["CHORUS_HTTP_PORT"]), edge
    # Only what the registry declares: no other process is handed another one's URL.
    declared = {(e.caller, e.variable) for e in EDGES.edges}
    variables = {e.variable for e in EDGES.edges}
    handed = {(name, v) for name, proc in dev.procs.items() for v in proc.env if v in variables}
    assert handed == declared


@pytest.mark.checkout
def test_with_a_project_the_platforms_edges_hold_and_a_service_env_still_wins(tmp_path: Path) -> None:
    dev = stack(
        tmp_path / "project",
        project=REFERENCE_PROJECT,
        service_env={"console": {"CHORUS_GATEWAY_URL": "http://elsewhere:1"}},
    )
    assert dev.procs["console"].env["CHORUS_GATEWAY_URL"] == "http://elsewhere:1"
    assert (
        dev.procs["gateway"]
        .env["CHORUS_AUDIT_URL"]
        .endswith(dev.procs["audit_projector"].env["CHORUS_HTTP_PORT"])
    )
    assert dev.procs["notifier"].env["CHORUS_CONSOLE_URL"] == dev.console_url


def test_a_stack_without_the_target_leaves_the_callers_setting_to_its_default(tmp_path: Path) -> None:
    dev = DevStack(tmp_path, services=("gateway",), env={"CHORUS_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"})
    assert "CHORUS_AUDIT_URL" not in dev.procs["gateway"].env


def test_the_chart_hands_each_caller_the_declared_urls_and_nothing_else() -> None:
    facts = chart.chart_registry(load_registry(ROOT / "schemas"))["services"]
    for name, svc in facts.items():
        expected_calls = {
            e.variable: {"service": e.target, "port": e.endpoint.port} for e in EDGES.of(name) if not e.link
        }
        assert svc["calls"] == expected_calls, name
        assert svc["links"] == {e.variable: e.target for e in EDGES.of(name) if e.link}, name


@pytest.mark.checkout
def test_compose_hands_each_caller_its_generated_file_and_sets_no_service_url_by_hand() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    services: dict[str, Any] = yaml.safe_load(text)["services"]
    assert compose.stale_files(compose.env_files(EDGES, yaml.safe_load(text))) == [], (
        "run python -m chorus.tools.compose"
    )
    names = compose.compose_services({"services": services})
    variables = {e.variable for e in EDGES.edges}
    for module, name in names.items():
        env_files = [f if isinstance(f, str) else f["path"] for f in services[name].get("env_file", [])]
        wanted = f"deploy/docker/http/{module}.env"
        assert (wanted in env_files) == bool(EDGES.of(module)), (name, env_files)
        assert env_files[-1] == f"deploy/docker/env/{name}.env", (
            f"{name}: its own settings come last (they may point elsewhere)"
        )
        by_hand = variables & set(services[name].get("environment") or {})
        assert not by_hand, f"{name} sets {by_hand} by hand: schemas/http.yaml derives them"
    gateway = (ROOT / "deploy" / "docker" / "http" / "gateway.env").read_text()
    assert f"CHORUS_AUDIT_URL=http://audit_projector:{DOCUMENTED_PORTS['audit_projector']}" in gateway
