"""The runtime's public surface (chorus.public): it exists, it is documented, and the
reference agents use nothing else of Chorus, as a project of one's own must not."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from chorus.public import PUBLIC, WHOLE_MODULE
from tests.support.imports import private_imports

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "runtime-api.md"
AGENTS = ["invoice_agent", "budget_agent", "payment_agent", "report_agent", "source_fetcher"]
REFERENCE_CONTRACTS = frozenset({"chorus_contracts.procurement", "chorus_contracts.research"})
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
    assert private_imports(ROOT / "services" / agent, REFERENCE_CONTRACTS) == []


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
