"""The runtime as a user gets it: what the wheels install. (Installed from a wheelhouse into
a virtualenv outside this repository, the wheels run the tutorial, tests/e2e/test_tutorial.py,
and every supported Python's tests, tests/deploy/test_pythons.py.)"""

from __future__ import annotations

import pytest

from chorus import __version__
from tests.support.wheel import (
    Wheels,
    build_wheels,
    installed,
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
