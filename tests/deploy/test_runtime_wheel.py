"""The runtime as a user gets it: the wheel, installed into a virtualenv of its own outside
this repository, where ``chorus new service`` starts a project whose generated tests pass on
the real Kafka broker and PostgreSQL."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chorus import __version__

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, args))} (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def build_wheel(tmp: Path) -> Path:
    """The wheel, built from a copy of the sources (pip builds in the tree it is given)."""
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    # symlinks=True keeps the link that ships the platform's registry inside chorus_contracts.
    for folder in ("services", "schemas"):
        shutil.copytree(ROOT / folder, source / folder, symlinks=True, ignore=ignore)
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", source, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("chorus-*.whl")
    return wheel


async def test_the_wheel_in_a_fresh_virtualenv_scaffolds_a_service_whose_tests_pass_on_kafka(
    tmp_path: Path, kafka_bootstrap: str, database_url: str
) -> None:
    wheel = build_wheel(tmp_path)
    assert wheel.name == f"chorus-{__version__}-py3-none-any.whl"
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    pip = venv / "bin" / "pip"
    run(pip, "install", "-q", "--require-hashes", "-r", ROOT / "requirements.lock", cwd=tmp_path)
    run(pip, "install", "-q", "--no-deps", wheel, cwd=tmp_path)

    # Nothing of this checkout leaks in: no PYTHONPATH, no registry path, another folder.
    env = {
        k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "CHORUS_SCHEMAS_DIR", "VIRTUAL_ENV"}
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["CHORUS_KAFKA_BOOTSTRAP"] = kafka_bootstrap
    env["CHORUS_DATABASE_URL"] = database_url
    project = tmp_path / "helpdesk"
    project.mkdir()
    where = run(
        venv / "bin" / "python",
        "-c",
        "import chorus, chorus_tools; print(chorus.__file__)",
        cwd=project,
        env=env,
    )
    assert where.startswith(str(venv)), where
    assert run(venv / "bin" / "chorus", "--version", cwd=project, env=env).strip() == f"chorus {__version__}"

    made = run(venv / "bin" / "chorus", "new", "service", "triage", cwd=project, env=env)
    assert "wrote services/triage/handlers.py" in made
    tests = run(venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=project, env=env)
    assert "2 passed" in tests, tests
