"""Every Python Chorus supports (requires-python: 3.10 to 3.13; 3.11 below), from the wheel: built once,
installed from a local wheelhouse into a fresh virtualenv per version, its unit tests (the
fast tier) passing there, and a project ``chorus new`` starts there passing its tests on
the real Kafka and PostgreSQL. `make test-pythons` runs this; `make test` leaves it out
(it needs every interpreter and a few minutes each)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from chorus import __version__
from tests.support.wheel import (
    EXTRAS,
    ROOT,
    Wheels,
    build_wheels,
    fill_wheelhouse,
    outside_env,
    run,
    scaffold_and_test,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.pythons]

VERSIONS = ("3.10", "3.12", "3.13")
"""3.11 is not among them: the wheel is pure Python, the same on each, and on 3.11 the
tutorial's test installs it from pip and runs a project's tests, and make test runs every
test there (CI's time goes further on the other three)."""


def interpreter(version: str) -> Path:
    """``python<version>`` on PATH (when it runs: a pyenv shim may name a version pyenv does
    not select), else pyenv's own copy. Missing is a failure, never a skip: CI has all four."""
    candidates = [Path(p) / f"python{version}" for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(pyenv_root.glob(f"versions/{version}.*/bin/python{version}"), reverse=True)
    for candidate in candidates:
        if not candidate.is_file():
            continue
        probe = subprocess.run(
            [str(candidate), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    pytest.fail(f"Python {version} is not installed (pyenv install {version}): Chorus supports it")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wheels]:
    yield build_wheels(tmp_path_factory.mktemp("wheels"))


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_wheel_installs_and_passes_its_tests_on_every_supported_python(
    version: str, wheels: Wheels, tmp_path: Path, kafka_bootstrap: str, database_url: str
) -> None:
    venv = tmp_path / "venv"
    run(interpreter(version), "-m", "venv", venv, cwd=tmp_path)
    pip: list[str | Path] = [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check"]
    # Both distributions: the fast tier tests the reference workflows' agents too (their
    # dependency on chorus-workflows is met by the wheel beside them, not by an index).
    wanted = [f"{wheels.chorus}[{EXTRAS}]", str(wheels.reference)]
    house = fill_wheelhouse(venv / "bin" / "python", version, *wanted)
    run(*pip, "install", "-q", "--no-index", "--find-links", house, *wanted, cwd=tmp_path)
    run(*pip, "check", cwd=tmp_path)
    shown = run(*pip, "show", "chorus-workflows", "chorus-workflows-reference", cwd=tmp_path)
    assert shown.count(f"Version: {__version__}") == 2, shown

    env = outside_env(venv, CHORUS_ENV="demo")
    # The unit tests of this checkout against the installed wheel: nothing puts services/
    # on the path, so every import of chorus comes from the virtualenv. Tests of the
    # checkout's own generated files (marked checkout) need its sources, not a wheel; the
    # compose run needs a Docker engine and runs once, in make test-compose.
    where = run(venv / "bin" / "python", "-c", "import chorus; print(chorus.__file__)", cwd=ROOT, env=env)
    assert where.startswith(str(venv)), where
    fast = run(
        venv / "bin" / "python", "-m", "pytest", "tests", "contracts-tests",
        "-m", "not integration and not checkout and not compose",
        "-q", "-n", "2", "-p", "no:cacheprovider", "--timeout=300", cwd=ROOT, env=env,
    )  # fmt: skip
    assert " passed" in fast and " failed" not in fast, fast[-3000:]

    settings = {"CHORUS_KAFKA_BOOTSTRAP": kafka_bootstrap, "CHORUS_DATABASE_URL": database_url}
    scaffold_and_test(venv, tmp_path / "helpdesk", outside_env(venv, **settings), __version__)
