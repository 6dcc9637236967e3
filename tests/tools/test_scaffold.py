"""``chorus new``: what it generates works, reads as our own code does, and what it refuses
it refuses without touching anything. (The generated integration test runs on Kafka in
tests/deploy/test_runtime_wheel.py, from the built wheel.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from chorus import __version__
from chorus.contracts.registry import load_registry
from chorus.testing.stack import isolated_schemas
from tests.support.imports import private_imports
from tests.support.processes import run_captured, user_env
from tests.support.processes import run_chorus as chorus

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


def tool(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_captured([str(BIN / args[0]), *args[1:]], cwd=cwd, timeout_s=600)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scaffold") / "helpdesk"
    root.mkdir()
    made = chorus(root, "new", "service", "triage")
    assert made.returncode == 0, made.stderr
    added = chorus(
        root, "new", "event", "ticket.classified", "--field", "category:name", "--field", "urgency:count",
        "--field", "vip:flag", "--producer", "triage",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    return root


def test_a_new_service_has_the_skeleton_of_every_chorus_service(project: Path) -> None:
    service = project / "services" / "triage"
    assert sorted(p.name for p in service.iterdir() if p.name != "__pycache__") == [
        "README.md", "__init__.py", "__main__.py", "adapters", "bootstrap.py", "config.py", "domain.py",
        "handlers.py", "service.py",
    ]  # fmt: skip
    registry = load_registry(project / "schemas")
    # The project's registry extends the platform's: both kinds of event are known.
    assert registry.knows("triage.requested") and registry.knows("workflow.started")
    # Its own events reach it, and the audit log (a workflow's status, its timeline).
    assert registry.topic_for("triage.requested").consumers == ["audit_projector", "triage"]
    # A redrive of its dead letters, a due timer of its workflows: the platform may write there.
    for writer in ("deadletter_service", "timer_service"):
        assert "helpdesk.triage" in registry.principals.services[writer].writes
    assert registry.principals.services["triage"].kind == "runtime"
    assert registry.examples[("ticket.classified", 1)][0].body["payload"] == {
        "category": "example",
        "urgency": 1,
        "vip": True,
    }


def test_the_projects_dockerfile_builds_on_chorus_image_of_this_release(project: Path) -> None:
    """The Dockerfile `chorus new` writes (no image is built here: this machine reaches no
    registry for the base): its base is the image the chart runs for this release, it copies
    what exists, every process finds the project's code and registry, and its dependency step
    lists exactly the project's dependencies."""
    lines = [
        line
        for line in (project / "Dockerfile").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    instructions = [line.split(" ", 1) for line in lines if not line.startswith(" ")]
    chart_values = yaml.safe_load((ROOT / "deploy" / "helm" / "chorus" / "values.yaml").read_text())
    assert ["ARG", f"CHORUS_IMAGE={chart_values['image']['repository']}:{__version__}"] in instructions
    assert ["FROM", "${CHORUS_IMAGE}"] in instructions
    assert instructions[-1] == ["USER", "chorus"]  # the base image's user, not root
    workdir = Path(dict(i for i in instructions if i[0] == "WORKDIR")["WORKDIR"])
    copied = [i[1].split()[0] for i in instructions if i[0] == "COPY"]
    assert copied == ["pyproject.toml", "schemas", "services"]
    assert all((project / path).exists() for path in copied)
    env = dict(item.split("=", 1) for i in instructions if i[0] == "ENV" for item in i[1].split())
    assert env == {"PYTHONPATH": str(workdir / "services"), "CHORUS_SCHEMAS_DIR": str(workdir / "schemas")}
    # The RUN's first command, run here: it prints the project's dependencies, one a line.
    [run] = [i[1] for i in instructions if i[0] == "RUN"]
    script = run.split(" > ", 1)[0].removeprefix("python -c ")
    printed = run_captured([sys.executable, "-c", script.strip('"')], cwd=project, timeout_s=60)
    declared = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    assert printed.stdout.splitlines() == declared
    ignored = (project / ".dockerignore").read_text().splitlines()
    assert {".venv/", ".chorus/", "tests/"} <= set(ignored)


def test_the_generated_handler_test_passes(project: Path) -> None:
    run = run_captured(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_triage_handlers.py"],
        cwd=project,
        env=user_env(),
        timeout_s=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_generated_code_passes_ruff_and_strict_mypy_with_the_projects_own_settings(project: Path) -> None:
    for args in (("ruff", "check", "."), ("ruff", "format", "--check", "."), ("mypy", "services", "tests")):
        run = tool(project, *args)
        assert run.returncode == 0, f"{' '.join(args)}:\n{run.stdout}{run.stderr}"


def test_generated_code_uses_only_the_public_surface(project: Path) -> None:
    assert private_imports(project / "services") == []
    assert private_imports(project / "tests") == []


def test_a_second_service_gets_a_port_of_its_own(project: Path) -> None:
    made = chorus(project, "new", "service", "reply_drafter")
    assert made.returncode == 0, made.stderr
    ports = [
        line.split("=")[1].strip()
        for name in ("triage", "reply_drafter")
        for line in (project / "services" / name / "config.py").read_text().splitlines()
        if "http_port" in line
    ]
    assert ports == ["8300", "8301"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("new", "service", "triage"), "exists already"),
        (("new", "service", "gateway"), "Chorus has a service of that name"),  # the platform's own
        (("new", "service", "Triage-2"), "lowercase"),
        (("new", "event", "workflow.started"), "exists already"),  # the platform's event
        (("new", "event", "ticket.classified"), "exists already"),
        (("new", "event", "ticket.closed", "--field", "at:datetime"), "not one of"),
        (("new", "event", "Ticket"), "lowercase and dotted"),
    ],
)
def test_what_cannot_be_made_is_refused_and_nothing_changes(
    project: Path, args: tuple[str, ...], says: str
) -> None:
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    refused = chorus(project, *args)
    assert refused.returncode == 2
    assert says in refused.stderr
    after = {p: p.read_bytes() for p in project.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert after == before


def test_a_project_may_not_redefine_a_platform_topic(tmp_path: Path) -> None:
    made = chorus(tmp_path, "new", "event", "ticket.opened", "--project", "desk")
    assert made.returncode == 0, made.stderr
    topic = yaml.safe_load((tmp_path / "schemas" / "topics" / "desk.ticket.yaml").read_text())
    topic["topic"] = "chorus.timers"
    (tmp_path / "schemas" / "topics" / "chorus.timers.yaml").write_text(yaml.safe_dump(topic))
    with pytest.raises(ValueError, match=r"platform's registry has the topic\(s\) \['chorus.timers'\]"):
        load_registry(tmp_path / "schemas")


def test_a_tests_own_copy_of_a_project_registry_keeps_what_the_union_grants(
    project: Path, tmp_path: Path
) -> None:
    principals = yaml.safe_load((project / "schemas" / "principals.yaml").read_text())
    principals["services"]["triage"]["reads"] = ["approvals.events"]  # a platform topic it reads
    (project / "schemas" / "principals.yaml").write_text(yaml.safe_dump(principals))
    copy = load_registry(isolated_schemas(tmp_path, "u1", root=project / "schemas"))
    assert copy.principals.services["triage"].reads == ["approvals.events.tu1"]
    assert "helpdesk.triage.tu1" in copy.principals.services["deadletter_service"].writes
    assert copy.knows("triage.requested") and "procurement" in copy.workflows


def test_a_workflow_type_starts_only_with_an_event_the_gateway_publishes(project: Path) -> None:
    workflows = project / "schemas" / "workflows.yaml"
    workflows.write_text(yaml.safe_dump({"triage_ticket": {"start": "triage.requested"}}))
    try:
        with pytest.raises(ValueError, match="does not list the gateway among its producers"):
            load_registry(project / "schemas")
        topic_file = project / "schemas" / "topics" / "helpdesk.triage.yaml"
        topic = yaml.safe_load(topic_file.read_text())
        topic["producers"].append("gateway")
        topic_file.write_text(yaml.safe_dump(topic))
        assert load_registry(project / "schemas").workflows["triage_ticket"].start == "triage.requested"
    finally:
        workflows.unlink()


def test_schemas_generate_follows_a_changed_model_and_leaves_hand_written_examples_alone(
    tmp_path: Path,
) -> None:
    made = chorus(tmp_path, "new", "event", "ticket.opened", "--project", "desk", "--field", "subject")
    assert made.returncode == 0, made.stderr
    events = tmp_path / "services" / "desk_contracts" / "events.py"
    events.write_text(
        events.read_text().replace(
            "    subject: Text\n", '    subject: Text\n    channel: Literal["mail", "chat"]\n'
        )
    )
    events.write_text(
        events.read_text().replace(
            "from __future__ import annotations\n",
            "from __future__ import annotations\n\nfrom typing import Literal\n",
        )
    )
    hand_written = tmp_path / "schemas" / "examples" / "ticket.opened" / "1" / "by-hand.json"
    generated = hand_written.with_name("example-1.json")
    hand_written.write_text(generated.read_text().replace('"example-ticket.opened-1"', '"mine"'))

    regenerated = chorus(tmp_path, "schemas", "generate")
    assert regenerated.returncode == 0, regenerated.stderr
    assert "wrote examples/ticket.opened/1/example-1.json" in regenerated.stdout
    assert json.loads(generated.read_text())["payload"] == {"subject": "example", "channel": "mail"}
    mine = json.loads(hand_written.read_text())  # not ours to rewrite, stale or not
    assert mine["idempotency_key"] == "mine" and mine["payload"] == {"subject": "example"}
