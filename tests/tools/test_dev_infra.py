"""``chorus dev infra``: a project's own Kafka and PostgreSQL, started from the scripts the
package ships, every credential in the project's ``.chorus/``. A new project's tests pass on
them with nothing of this test run's stack in the environment, and every ``chorus`` command
in the project (``chorus dev up`` too) reaches them through the settings ``infra up``
recorded (docs/tutorial.md runs that part)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import CHORUS, run_captured

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def free_pair() -> int:
    """A port whose next one is free too: Kafka's client port, then its controller's."""
    for _ in range(200):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port: int = first.getsockname()[1]
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no two free ports in a row")


def dev(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_captured([CHORUS, "dev", "infra", *args], cwd=project, env=env, timeout_s=900)


def exports(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        found[name] = value.strip("'")
    return found


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A new project, and a user's environment: none of this run's CHORUS_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_") and k != "PYTHONPATH"}
    folder = tmp_path / "desk"
    folder.mkdir()
    made = run_captured([CHORUS, "new", "service", "triage"], cwd=folder, env=env, timeout_s=120)
    assert made.returncode == 0, made.stderr
    try:
        yield folder, env
    finally:  # its data may live outside tmp_path (postgres.sh, as root): removed with it
        dev(folder, env, "reset")


def test_infra_up_runs_the_projects_own_kafka_and_postgres_its_tests_pass_on(
    project: tuple[Path, dict[str, str]],
) -> None:
    folder, env = project
    state = folder / ".chorus"
    before = dev(folder, env, "env")
    assert before.returncode == 1 and "`chorus dev infra up` first" in before.stderr
    kafka_port, postgres_port = free_pair(), free_pair()
    up = dev(folder, env, "up", f"--kafka-port={kafka_port}", f"--postgres-port={postgres_port}")
    assert up.returncode == 0, up.stdout + up.stderr
    assert (
        f"Kafka on 127.0.0.1:{kafka_port} and PostgreSQL on 127.0.0.1:{postgres_port} for desk" in up.stdout
    )
    # The project's registry is provisioned: its topic, and its service's login and role.
    assert "desk.triage: created" in up.stdout
    assert (state / "kafka" / "secrets" / "users" / "triage.password").is_file()
    assert "created: " in up.stdout and "triage" in up.stdout.rsplit("database roles:", 1)[1]

    settings = exports(dev(folder, env, "env").stdout)
    assert settings["CHORUS_KAFKA_BOOTSTRAP"] == f"127.0.0.1:{kafka_port}"
    assert settings["CHORUS_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert settings["CHORUS_KAFKA_SSL_CAFILE"].startswith(str(state))
    assert f"@127.0.0.1:{postgres_port}/" in settings["CHORUS_DATABASE_URL"]
    assert (state / "infra.env").stat().st_mode & 0o077 == 0  # the admins' passwords
    assert dev(folder, env, "status").returncode == 0

    # With nothing exported, the project's own tests (one of them on Kafka and PostgreSQL)
    # pass on it, and every chorus command in the project reaches it.
    tests = run_captured(
        [str(Path(CHORUS).parent / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=folder / "tests",
        env=env,
        timeout_s=600,
    )
    assert "2 passed" in tests.stdout, tests.stdout + tests.stderr
    applied = run_captured([CHORUS, "topics", "apply"], cwd=folder / "services", env=env, timeout_s=120)
    assert "already match it" in applied.stdout and f"127.0.0.1:{kafka_port}" in applied.stdout, applied

    # Its ports hold its data: another is refused until a reset.
    moved = dev(folder, env, "up", f"--kafka-port={kafka_port + 2}")
    assert moved.returncode == 2 and "reset` first" in moved.stderr
    assert dev(folder, env, "down").returncode == 0
    stopped = dev(folder, env, "status")
    assert stopped.returncode == 3 and "stopped" in stopped.stdout


def test_a_port_another_stack_holds_is_refused_with_the_remedy(
    project: tuple[Path, dict[str, str]], kafka_bootstrap: str
) -> None:
    """This run's own Kafka answers on its port: infra up does not take it for the project's."""
    folder, env = project
    taken = kafka_bootstrap.split(",", maxsplit=1)[0].rpartition(":")[2]
    refused = dev(folder, env, "up", f"--kafka-port={taken}", f"--postgres-port={free_pair()}")
    assert refused.returncode == 1
    assert f"127.0.0.1:{taken} is taken by something this project did not start" in refused.stderr
    assert "choose another --kafka-port" in refused.stderr
