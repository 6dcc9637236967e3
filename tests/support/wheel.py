"""The runtime as a user gets it: the wheel built from this checkout, installed into a
virtualenv of its own outside it, and a project that ``chorus new`` starts there."""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from pathlib import Path
from typing import NamedTuple

from tests.support.helm import ensure_helm, of_kind, parse, service_of, template
from tests.support.processes import run_captured, user_env

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = "analytics,otlp,pydantic-ai,dev"
"""What a wheel's own tests need beside the runtime (the tests use the dev tools)."""
WHEELHOUSE = ROOT / ".local" / "wheelhouse"
"""Kept between runs, one folder per Python version: what pip downloaded once installs offline."""


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout_s: float = 900) -> str:
    """Run a command; its stdout, or an assertion naming the command, its exit and output."""
    done = run_captured([str(a) for a in args], cwd=cwd, env=env, timeout_s=timeout_s)
    assert done.returncode == 0, (
        f"{' '.join(map(str, args))} (exit {done.returncode}):\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    )
    return done.stdout


class Wheels(NamedTuple):
    chorus: Path
    """chorus-workflows: the runtime, contracts, tooling and the platform's services."""
    reference: Path
    """chorus-workflows-reference: the reference workflows' agents and the sandbox."""


def build_wheels(tmp: Path) -> Wheels:
    """Both wheels, built from a copy of the sources (pip builds in the tree it is given)."""
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    # symlinks=True keeps the link that ships the platform's registry inside chorus.contracts.
    # ... and what chorus.tools ships from deploy/: the chart (which links to the alert rules
    # and dashboards of deploy/observability) and the local stack's scripts.
    deploy = ("deploy/helm/chorus", "deploy/observability", "deploy/local", "deploy/shared")
    for folder in ("services", "schemas", *deploy):
        shutil.copytree(ROOT / folder, source / folder, symlinks=True, ignore=ignore)
    for project in (source, source / "services" / "chorus" / "reference"):
        run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", project, cwd=tmp)
    (chorus,) = (tmp / "dist").glob("chorus_workflows-*.whl")
    (reference,) = (tmp / "dist").glob("chorus_workflows_reference-*.whl")
    return Wheels(chorus, reference)


def fill_wheelhouse(python: Path | str, version: str, *wanted: str) -> Path:
    """WHEELHOUSE's folder for ``version`` (``python``'s), with every dependency of
    ``wanted`` (requirements, or wheels with extras) in it, downloaded once. Chorus's own
    wheels are not kept there: an earlier build of the same version would answer for this one."""
    house = WHEELHOUSE / version
    run(python, "-m", "pip", "--disable-pip-version-check", "download", "-q", "-d", house, *wanted, cwd=ROOT)
    for copy in house.glob("chorus_workflows*.whl"):
        copy.unlink()
    return house


def top_level(wheel: Path) -> set[str]:
    """What ``wheel`` installs at the top of site-packages (its metadata folder aside)."""
    with zipfile.ZipFile(wheel) as archive:
        names = {name.split("/")[0] for name in archive.namelist()}
    return {name for name in names if not name.endswith(".dist-info")}


def installed(wheel: Path) -> list[str]:
    """Every file ``wheel`` installs, its metadata folder's too."""
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def outside_env(venv: Path, **settings: str) -> dict[str, str]:
    """This process's environment as a user's shell in ``venv`` has it: nothing of this
    checkout (no PYTHONPATH, no registry path, no other virtualenv), plus ``settings``."""
    env = {k: v for k, v in user_env().items() if k != "VIRTUAL_ENV"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env.update(settings)
    return env


def scaffold_and_test(venv: Path, project: Path, env: dict[str, str], version: str) -> None:
    """In an empty folder, ``chorus new service`` starts a project whose generated tests
    pass on the real Kafka and PostgreSQL ``env`` names, with ``venv``'s chorus only."""
    project.mkdir()
    python = venv / "bin" / "python"
    where = run(python, "-c", "import chorus, chorus.tools; print(chorus.__file__)", cwd=project, env=env)
    assert where.startswith(str(venv)), where
    assert run(venv / "bin" / "chorus", "--version", cwd=project, env=env).strip() == f"chorus {version}"
    made = run(venv / "bin" / "chorus", "new", "service", "triage", cwd=project, env=env)
    assert "wrote services/triage/handlers.py" in made
    tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=project, env=env)
    assert "2 passed" in tests, tests
    # Its deployment, from what the wheel ships: the chart with the project's service in it.
    written = run(venv / "bin" / "chorus", "deploy", "helm", cwd=project, env=env)
    assert "the chart of helpdesk" in written, written
    chart = project / "deploy" / "helm" / "chorus"
    docs = parse(template(ensure_helm(), [], chart=chart))
    images = {
        service_of(d): d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in of_kind(docs, "Deployment")
    }
    assert images["triage"] == images["gateway"] == "helpdesk:0.1.0", images
