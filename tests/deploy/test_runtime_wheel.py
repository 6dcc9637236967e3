"""The runtime as a user gets it: the wheel, installed into a virtualenv of its own outside
this repository, where ``chorus new service`` starts a project whose generated tests pass on
the real Kafka broker and PostgreSQL."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chorus import __version__
from tests.support.wheel import ROOT, build_wheel, outside_env, run, scaffold_and_test

pytestmark = [pytest.mark.integration, pytest.mark.slow]


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
    env = outside_env(venv, CHORUS_KAFKA_BOOTSTRAP=kafka_bootstrap, CHORUS_DATABASE_URL=database_url)
    scaffold_and_test(venv, tmp_path / "helpdesk", env, __version__)
