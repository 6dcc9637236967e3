"""docker-compose.yml run for real: the image built, the secured stack up with the support
project's services (`chorus deploy compose`), the demo and the README's samples against
it, the CLI from the host, and the stack down (`make test-compose`; CI runs it).

Where no container registry answers (this machine), the bases are built from Debian
packages (deploy/local/docker.sh bases) and given to the same compose file. The stack runs
from a copy of this checkout's files, as a clean clone has them, with each container's env
file holding `CHORUS_ENV=demo` alone, as README.md's Docker section says for a local demo.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chorus.tools.demo import COMPOSE, Client, sandbox_stats, waiting_on
from tests.support.processes import CHORUS, run_captured
from tests.support.wait import wait_until

pytestmark = [pytest.mark.compose, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "chorus-compose-test"
SUBMITTER, MANAGER, EDITOR, OPERATOR = (
    "demo-submitter-key",
    "demo-manager-key",
    "demo-editor-key",
    "demo-operator-key",
)
LOGS = ROOT / ".local" / "test-output" / "compose"


class Compose:
    """`docker compose` on the copy, with the bases' env file and the project's override."""

    def __init__(self, tree: Path, bases_env: str) -> None:
        self.tree = tree
        self.base = ["docker", "compose", "--env-file", bases_env, "-p", PROJECT, "-f", "docker-compose.yml"]
        self.override = ["-f", "examples/support/docker-compose.support.yml"]

    def run(self, *args: str, platform_only: bool = False, timeout_s: float = 900) -> str:
        command = [*self.base, *([] if platform_only else self.override), *args]
        done = run_captured(command, cwd=self.tree, timeout_s=timeout_s)
        assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    def keep_logs(self) -> None:
        LOGS.mkdir(parents=True, exist_ok=True)
        for name in self.run("config", "--services").split():
            done = run_captured([*self.base, *self.override, "logs", "--no-color", name], cwd=self.tree)
            (LOGS / f"{name}.log").write_text(done.stdout + done.stderr)


def checkout_copy(into: Path) -> Path:
    """This checkout's files as a clone has them (tracked, plus new ones not ignored): a
    person's own deploy/docker/env/*.env are ignored, so never read."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    tree = into / "chorus"
    for name in filter(None, listed.split("\0")):
        source, copy = ROOT / name, tree / name
        if source.exists() or source.is_symlink():  # a file deleted but not yet committed: gone
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy, follow_symlinks=False)
    return tree


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compose]:
    if shutil.which("docker") is None or run_captured(["docker", "info"]).returncode != 0:
        pytest.fail("no Docker engine answers: make test-compose starts one (deploy/local/docker.sh ensure)")
    tree = checkout_copy(tmp_path_factory.mktemp("compose"))
    # README.md, Docker: for a local demo, CHORUS_ENV=demo alone in each container's file.
    env_dir = tree / "deploy" / "docker" / "env"
    for example in env_dir.glob("*.env.example"):
        (env_dir / example.name.removesuffix(".example")).write_text("CHORUS_ENV=demo\n")
    (env_dir / "triage_agent.env").write_text("CHORUS_ENV=demo\n")  # the project's service
    generated = run_captured(
        [CHORUS, "deploy", "compose", "--compose-file", "docker-compose.yml", "--dir", "examples/support"],
        cwd=tree,
    )
    assert generated.returncode == 0, generated.stderr
    bases = run_captured([str(ROOT / "deploy" / "local" / "docker.sh"), "bases"], timeout_s=1800)
    assert bases.returncode == 0, bases.stderr
    compose = Compose(tree, bases.stdout.strip().splitlines()[-1])
    compose.run("down", "-v", "--remove-orphans")  # what a killed earlier run left
    try:
        # Chorus's image first: the project's builds on it (the override's header says so).
        compose.run("build", platform_only=True, timeout_s=1800)
        compose.run("build", timeout_s=900)
        compose.run("up", "-d", "--wait", "--wait-timeout", "600", timeout_s=900)
        yield compose
    finally:
        compose.keep_logs()
        compose.run("down", "-v", "--remove-orphans")


def _cli(*args: str, key: str, cwd: Path) -> str:
    done = run_captured([CHORUS, *args], cwd=cwd, env={**os.environ, "CHORUS_API_KEY": key, "COLUMNS": "240"})
    assert done.returncode == 0, f"chorus {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


async def test_the_samples_as_shipped_reach_the_sandbox_and_reviewers_decide_from_the_host(
    stack: Compose,
) -> None:
    samples = stack.tree / "deploy" / "docker" / "samples"
    client = Client(COMPOSE.api_url)  # the demo's: it polls a workflow as the submitter
    async with client.http:  # closed whatever the test finds
        # README.md's curl, with the compose samples: every URL in them is the sandbox's.
        submitted = await client.http.post(
            "/v1/workflows/procurement",
            content=(samples / "procurement-request.json").read_bytes(),
            headers={
                "Authorization": f"Bearer {SUBMITTER}",
                "Idempotency-Key": "compose-sample",
                "Content-Type": "application/json",
            },
        )
        assert submitted.status_code == 202, submitted.text  # its callback URL passed the egress check
        procurement = submitted.json()["workflow_id"]
        report = await client.http.post(
            "/v1/workflows/research_report",
            content=(samples / "report-request.json").read_bytes(),
            headers={"Authorization": f"Bearer {SUBMITTER}", "Content-Type": "application/json"},
        )
        assert report.status_code == 202, report.text
        report_id = report.json()["workflow_id"]

        waiting = await client.wait_for(procurement, waiting_on("manager"), "the manager's approval")
        # The reviewer decides with the CLI on the host, through the published gateway.
        _cli(
            "approvals", "decide", waiting["pending_approval"]["approval_id"], "reject", "-m", "not this one",
            key=MANAGER, cwd=stack.tree,
        )  # fmt: skip
        ended = await client.wait_for(procurement, lambda s: s.get("status") == "rejected", "the rejection")
        assert ended["status"] == "rejected"

        # The sources were fetched from the sandbox through the egress check, at call time.
        drafted = await client.wait_for(
            report_id, waiting_on("editor"), "the editor's approval", timeout_s=120
        )
        fetched = {
            item["payload"]["task"] for item in drafted["timeline"] if item["event_type"] == "source.fetched"
        }
        assert fetched == {"alpha", "beta", "gamma"}
        _cli(
            "approvals", "decide", drafted["pending_approval"]["approval_id"], "approve", "-m", "ok",
            key=EDITOR, cwd=stack.tree,
        )  # fmt: skip
        await client.wait_for(report_id, lambda s: s.get("status") == "completed", "the report's completion")

    # Their completion webhooks reached the sandbox too, signed.
    wanted = {(procurement, "rejected"), (report_id, "completed")}

    async def signed_webhooks() -> set[tuple[str, str]]:
        hooks = (await sandbox_stats(COMPOSE.sandbox_url))["webhooks"]
        return {(h["body"]["workflow_id"], h["body"]["outcome"]) for h in hooks if h["signature_valid"]}

    await wait_until(
        signed_webhooks, until=wanted.issubset, timeout_s=60, interval_s=0.5, what="both webhooks, signed"
    )


def test_the_demo_runs_against_compose_from_the_host(stack: Compose) -> None:
    demo = run_captured(
        [sys.executable, "-m", "chorus.tools.demo", "--compose"],
        cwd=stack.tree,
        timeout_s=600,
    )
    assert demo.stdout.strip().splitlines()[-1] == (
        "demo: procurement=completed report=completed support=completed payments=1"
    ), demo.stdout[-4000:] + demo.stderr[-2000:]


def test_the_cli_on_the_host_reads_the_stack_over_http_and_kafka(stack: Compose) -> None:
    # README.md, Docker: the CA and the principals' passwords out of the setup container,
    # then an operator's login for the published listener.
    login = stack.tree / ".local" / "compose"
    login.mkdir(parents=True)
    stack.run("cp", "setup:/var/lib/chorus/provisioning/.", str(login))
    config = _cli(
        "access", "client-config", "chorus-operator", "--env",
        "--users-dir", str(login / "users"), "--bootstrap", "127.0.0.1:29092",
        key=OPERATOR, cwd=stack.tree,
    )  # fmt: skip
    operator = dict(line.split("=", 1) for line in config.splitlines() if "=" in line)
    ended = run_captured(
        [CHORUS, "subscribe", "workflow.ended", "--from-beginning", "-e", "--json"],
        cwd=stack.tree,
        env={**os.environ, **operator},
        timeout_s=120,
    )
    assert ended.returncode == 0, ended.stderr
    endings = [json.loads(line) for line in ended.stdout.splitlines() if line.startswith("{")]
    # The samples' two and the demo's four.
    assert len(endings) >= 6, ended.stdout[-2000:]

    timeline = _cli("timeline", endings[-1]["workflow_id"], key=OPERATOR, cwd=stack.tree)
    assert "workflow.ended" in timeline
    health = run_captured([CHORUS, "status"], cwd=stack.tree, env={**os.environ, "COLUMNS": "240"})
    assert health.returncode == 0, health.stdout + health.stderr  # every service answers, healthy
    assert "key_service" in health.stdout, health.stdout  # its /health published, not its API
