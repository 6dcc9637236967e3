"""docker-compose.yml stays a valid Compose file for users who run Chorus in Docker."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

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
        depends = service.get("depends_on", {})
        for dependency in infra:
            assert depends.get(dependency, {}).get("condition") == "service_healthy", (
                f"service {name} does not wait for {dependency} to be healthy"
            )
