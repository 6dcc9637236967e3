"""docker-compose.yml stays a valid Compose file for users who run Chorus in Docker."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from chorus_tools.devstack import DOCUMENTED_PORTS, SERVICES

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_is_valid() -> None:
    if shutil.which("docker") is None:
        pytest.fail("the docker client is needed to validate docker-compose.yml (no engine needed)")
    # `make setup` installs the compose plugin when the client lacks it; this makes sure.
    plugin = subprocess.run(
        [str(ROOT / "deploy" / "local" / "compose-plugin.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert plugin.returncode == 0, plugin.stderr
    # Plain `docker compose`, as a user or CI would run it: no private DOCKER_CONFIG.
    proc = subprocess.run(
        ["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_compose_service_waits_for_healthy_infrastructure() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    infra = {"kafka", "postgres"}
    for name, service in compose["services"].items():
        if name in infra:
            assert "healthcheck" in service, f"{name} has no healthcheck"
            continue
        if service.get("profiles") == ["observability"]:
            continue  # Prometheus and Grafana watch; they need neither
        depends = service.get("depends_on", {})
        for dependency in infra:
            assert depends.get(dependency, {}).get("condition") == "service_healthy", (
                f"service {name} does not wait for {dependency} to be healthy"
            )


COMPOSE_NAME = {"outcome_analytics": "analytics"}
"""Compose's name of a dev-stack process where they differ."""


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def test_every_service_runs_in_compose_on_the_port_the_readme_documents() -> None:
    """Health-checked on its documented port and published there (on 127.0.0.1 only), as
    `make services` runs it: the README's port table holds for both."""
    services = _compose()["services"]
    for name in (*SERVICES, "outcome_analytics", "console"):
        service = services[COMPOSE_NAME.get(name, name)]
        port = DOCUMENTED_PORTS[name]
        assert service["command"][-1] == name, name
        assert f"127.0.0.1:{port}/health" in service["healthcheck"]["test"][-1], name
        published = [str(p) for p in service.get("ports", [])]
        if name == "key_service":  # data keys: reached inside the compose network only
            assert not published
        else:
            assert f"127.0.0.1:{port}:{port}" in published, (name, published)
        assert all(p.startswith("127.0.0.1:") for p in published), (name, published)


def test_the_observability_profile_scrapes_every_service_and_provisions_the_dashboards() -> None:
    services = _compose()["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["observability"]
    proc = subprocess.run(
        [
            "docker",
            "compose",
            "-f",
            str(ROOT / "docker-compose.yml"),
            "--profile",
            "observability",
            "config",
            "-q",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    config = ROOT / "deploy" / "observability" / "prometheus" / "prometheus.compose.yml"
    checked = subprocess.run(
        [shutil.which("promtool") or "promtool", "check", "config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    [job] = yaml.safe_load(config.read_text())["scrape_configs"]
    scraped = {
        target: group["labels"]["service"] for group in job["static_configs"] for target in group["targets"]
    }
    assert scraped == {
        f"{COMPOSE_NAME.get(name, name)}:{DOCUMENTED_PORTS[name]}": name
        for name in (*SERVICES, "outcome_analytics", "console")
    }
    mounts = services["grafana"]["volumes"]
    provider = yaml.safe_load(
        (
            ROOT / "deploy" / "observability" / "grafana" / "provisioning" / "dashboards" / "chorus.yml"
        ).read_text()
    )
    path = provider["providers"][0]["options"]["path"]
    assert f"./deploy/observability/grafana/dashboards:{path}:ro" in mounts
