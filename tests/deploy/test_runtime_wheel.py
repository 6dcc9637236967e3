"""The runtime as a user gets it: the wheel, installed into a virtualenv of its own outside
this repository, where ``chorus new service`` starts a project whose generated tests pass on
the real Kafka broker and PostgreSQL."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chorus import __version__
from tests.support.wheel import (
    ROOT,
    Wheels,
    build_wheels,
    installed,
    outside_env,
    run,
    scaffold_and_test,
    top_level,
)

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    return build_wheels(tmp_path_factory.mktemp("wheels"))


@pytest.mark.checkout
def test_each_distribution_installs_the_chorus_namespace_and_nothing_else_at_the_top(wheels: Wheels) -> None:
    """Nothing generic (a ``gateway``, a ``console``, a ``sandbox``) lands in a user's
    site-packages: one namespace, and production installs leave the reference code out."""
    assert wheels.chorus.name == f"chorus_workflows-{__version__}-py3-none-any.whl"
    assert wheels.reference.name == f"chorus_workflows_reference-{__version__}-py3-none-any.whl"
    assert top_level(wheels.chorus) == top_level(wheels.reference) == {"chorus"}
    platform = installed(wheels.chorus)
    assert not [name for name in platform if name.startswith("chorus/reference/")]
    for package in (
        "chorus/platform/gateway/",
        "chorus/contracts/schemas/",
        "chorus/tools/templates/",
        "chorus/tools/helm/templates/",  # the chart `chorus deploy helm` writes into a project
        "chorus/tools/helm/files/dashboards/",
        "chorus/tools/localstack/deploy/local/kafka.sh",  # what `chorus dev infra up` runs
        "chorus/tools/localstack/deploy/shared/kafka-security.sh",
    ):
        assert any(name.startswith(package) for name in platform), package
    assert f"chorus_workflows-{__version__}.dist-info/licenses/LICENSE" in platform
    reference = installed(wheels.reference)
    assert all(name.startswith(("chorus/reference/", "chorus_workflows_reference-")) for name in reference)
    assert "chorus/reference/sandbox/app.py" in reference
    assert "chorus/reference/invoice_agent/service.py" in reference


@pytest.mark.integration
async def test_the_wheel_in_a_fresh_virtualenv_scaffolds_a_service_whose_tests_pass_on_kafka(
    wheels: Wheels, tmp_path: Path, kafka_bootstrap: str, database_url: str
) -> None:
    """The platform's wheel alone (no reference workflows) is all a new project needs."""
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    pip = venv / "bin" / "pip"
    run(pip, "install", "-q", "--require-hashes", "-r", ROOT / "requirements.lock", cwd=tmp_path)
    run(pip, "install", "-q", "--no-deps", wheels.chorus, cwd=tmp_path)

    # Nothing of this checkout leaks in: no PYTHONPATH, no registry path, another folder.
    env = outside_env(venv, CHORUS_KAFKA_BOOTSTRAP=kafka_bootstrap, CHORUS_DATABASE_URL=database_url)
    scaffold_and_test(venv, tmp_path / "helpdesk", env, __version__)
