"""The runtime's public surface (chorus.public): it exists, it is documented, and the
reference agents use nothing else of Chorus, as a project of one's own must not."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from chorus.public import PUBLIC, WHOLE_MODULE
from tests.support.imports import private_imports
from tests.support.processes import run_captured

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "runtime-api.md"
AGENTS = ["invoice_agent", "budget_agent", "payment_agent", "report_agent", "source_fetcher"]
REFERENCE_CONTRACTS = frozenset({"chorus.contracts.procurement", "chorus.contracts.research"})
"""The reference workflows' own events: in the platform's package (for now), their agents' alone."""


def test_every_public_name_exists() -> None:
    missing = [
        f"{module}.{name}"
        for module, names in PUBLIC.items()
        for name in names
        if not hasattr(importlib.import_module(module), name)
    ]
    assert missing == []


def test_every_public_module_and_name_is_documented() -> None:
    doc = DOC.read_text()
    undocumented = [
        f"{module}.{name}"
        for module, names in PUBLIC.items()
        for name in (names or {module.rsplit(".", 1)[-1]})
        if f"`{name}`" not in doc and f".{name}`" not in doc
    ]
    assert undocumented == []
    assert [m for m, names in PUBLIC.items() if names is not WHOLE_MODULE and f"`{m}`" not in doc] == []


@pytest.mark.parametrize("agent", AGENTS)
def test_a_reference_agent_uses_only_the_public_surface(agent: str) -> None:
    folder = ROOT / "services" / "chorus" / "reference" / agent
    assert private_imports(folder, REFERENCE_CONTRACTS, own_package=f"chorus.reference.{agent}") == []


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    service = tmp_path / "svc"
    service.mkdir()
    (service / "handlers.py").write_text(
        "from chorus.service import Outcome\nfrom chorus.store import ServiceStore\nimport chorus.kafka\n"
    )
    assert private_imports(service) == [
        "svc/handlers.py: chorus.store.ServiceStore",
        "svc/handlers.py: chorus.kafka.*",
    ]


def test_chorus_public_re_exports_every_public_name_as_it_is() -> None:
    public = importlib.import_module("chorus.public")
    differ = [
        f"{module}.{name}"
        for module, names in PUBLIC.items()
        if names is not WHOLE_MODULE
        for name in names
        if getattr(public, name, None) is not getattr(importlib.import_module(module), name)
    ]
    assert differ == []


# -- 1.0's module paths (chorus.renamed) -----------------------------------------------------

OLD_CONTRACTS = """\
import warnings
warnings.simplefilter("always")
import chorus.public
from chorus_contracts.base import EventModel
import chorus_contracts.lifecycle
import chorus.contracts.base, chorus.contracts.lifecycle
assert EventModel is chorus.contracts.base.EventModel
assert chorus_contracts.lifecycle is chorus.contracts.lifecycle
print("same modules")
"""


def test_code_written_for_1_0_imports_the_contracts_by_their_old_path_and_is_told_the_new_one() -> None:
    """1.0 documented ``chorus_contracts.*`` as public; 1.1 moved it into the namespace. The
    old path answers the very same modules (an event model defined twice would be refused)
    and warns once per module until 2.0."""
    done = run_captured([sys.executable, "-c", OLD_CONTRACTS], cwd=ROOT, timeout_s=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "same modules"
    assert "chorus_contracts.base is chorus.contracts.base since Chorus 1.1" in done.stderr
    assert "DeprecationWarning" in done.stderr
    refused = run_captured(
        [
            sys.executable,
            "-W",
            "error::DeprecationWarning",
            "-c",
            "import chorus; import chorus_contracts.base",
        ],
        cwd=ROOT,
        timeout_s=60,
    )
    assert refused.returncode != 0 and "import chorus.contracts" in refused.stderr
    # Only the public package keeps an old path: 1.0's tooling and services were never public.
    gone = run_captured([sys.executable, "-c", "import chorus; import chorus_tools"], cwd=ROOT, timeout_s=60)
    assert "No module named 'chorus_tools'" in gone.stderr
