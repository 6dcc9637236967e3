"""docs/tutorial.md, run as a reader with none of Chorus but its wheels would: from
`pip install` in an empty folder named support (under pytest's `mktemp -d`), every command
with the output the page shows, every file it writes; then what it built is
examples/support, file for file (the third reference workflow is what the tutorial writes),
and the chart it wrote renders and validates.

The page runs in a network namespace of the test's own: its loopback has the documented
ports free (the test stack's Kafka and PostgreSQL hold them outside it), so `chorus dev
infra up` starts the project's own Kafka and PostgreSQL on them, and nothing beyond this
machine is reachable. So the page's `pip install` is served by a local wheelhouse (the wheels
built from this checkout and their dependencies, downloaded before), as an index would serve
a released version, and Kafka's jars come from the local Maven repository that `make up`
filled. Nothing of the checkout is on the reader's paths."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chorus.contracts.registry import load_registry
from tests.support.helm import INVARIANTS, ensure_helm, of_kind, parse, service_of, template, validate
from tests.support.netns import exec_in, network_namespace
from tests.support.tutorial import run_markdown
from tests.support.wheel import Wheels, build_wheels, fill_wheelhouse, run

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.wheel]

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
EXAMPLE = ROOT / "examples" / "support"
PAGE_INSTALLS = ("pytest", "pytest-asyncio")
"""What the page's `pip install` names beside the two distributions."""
NOT_BUILT = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".chorus", ".venv", "deploy"}
"""What running a project leaves beside what it is (its virtualenv, caches, the dev stack's
logs and the infrastructure's data), and what `chorus deploy helm` generates from it
(rendered and validated instead)."""


def reader_env(folder: Path, wheels: Wheels, house: Path) -> dict[str, str]:
    """A root shell's environment after the page's "Before you start" (the virtualenv
    activated), pip pointed at the local wheelhouse; nothing of this test process besides."""
    venv = folder / ".venv"
    # `python3` is this interpreter's base (the virtualenv the tests run in is the checkout's).
    python = Path(sys.base_prefix) / "bin"
    return {
        "HOME": os.environ["HOME"],  # Maven's local repository, where `make up` put Kafka's jars
        "LANG": "C.UTF-8",
        "PATH": f"{venv / 'bin'}:{python}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "VIRTUAL_ENV": str(venv),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": f"{wheels.chorus.parent} {house}",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PYTHONUNBUFFERED": "1",  # stdout and stderr in the order they were written
        "COLUMNS": "120",  # a terminal's width: the tables as a reader sees them
    }


def built_files(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not NOT_BUILT & set(path.relative_to(folder).parts)
    }


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    return build_wheels(tmp_path_factory.mktemp("wheels"))


def _tidy(folder: Path, env: dict[str, str], namespace: str) -> None:
    """What the page started and did not stop (it failed half-way), stopped; the project's
    infrastructure's data deleted (its PostgreSQL cluster lives outside the folder)."""
    chorus = [*exec_in(namespace), str(folder / ".venv" / "bin" / "chorus")]
    if not Path(chorus[-1]).exists():
        return  # the page failed before it installed anything
    if (folder / ".chorus" / "dev.pid").exists():
        subprocess.run([*chorus, "dev", "down"], cwd=folder, env=env, check=False, timeout=300)
    subprocess.run([*chorus, "dev", "infra", "reset"], cwd=folder, env=env, check=False, timeout=300)


async def test_the_tutorial_runs_from_pip_install_in_an_empty_folder_and_builds_examples_support(
    tmp_path: Path, wheels: Wheels
) -> None:
    version = "{}.{}".format(*sys.version_info[:2])
    wanted = (str(wheels.chorus), str(wheels.reference), *PAGE_INSTALLS)
    house = await asyncio.to_thread(fill_wheelhouse, sys.executable, version, *wanted)
    folder = tmp_path / "support"
    folder.mkdir()
    env = reader_env(folder, wheels, house)
    # Nothing of the checkout on the reader's paths (the wheelhouse stands in for an index).
    assert str(ROOT) not in env["PATH"] and "PYTHONPATH" not in env
    with network_namespace("chorus-tutorial") as namespace:
        try:
            await asyncio.to_thread(run_markdown, TUTORIAL, folder, env, 600, exec_in(namespace))
        finally:
            await asyncio.to_thread(_tidy, folder, env, namespace)
    python = folder / ".venv" / "bin" / "python"
    where = run(python, "-c", "import chorus; print(chorus.__file__)", cwd=folder, env=env)
    assert where.startswith(str(folder / ".venv")), where  # the wheel, installed by the page

    built, example = built_files(folder), built_files(EXAMPLE)
    assert sorted(built) == sorted(example)
    assert [name for name in built if built[name] != example[name]] == []
    # The page's deployment: the chart it wrote renders, every object valid for its API, and
    # keeps the chart's promises for the reader's service as for the platform's.
    text = template(ensure_helm(), [], chart=folder / "deploy" / "helm" / "chorus")
    assert validate(text, tmp_path)["errors"] == []
    docs = parse(text)
    assert "triage_agent" in {service_of(d) for d in of_kind(docs, "Deployment")}
    registry = load_registry(folder / "schemas")
    for name, check in INVARIANTS.items():
        assert check(docs, text, registry) == [], name
