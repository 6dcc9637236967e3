"""The kernel stays small: features plug into it (services/chorus/README.md), so a change
that makes it grow past its budget is a change that belongs in a feature package."""

from __future__ import annotations

from pathlib import Path

import pytest

CHORUS = Path(__file__).resolve().parents[2] / "services" / "chorus"
BUDGETS = {"kernel": 6_000, "base": 1_300}
"""Lines (as ``wc -l`` counts them) of each package's Python files."""


def lines(package: str) -> int:
    return sum(len(path.read_text().splitlines()) for path in (CHORUS / package).rglob("*.py"))


@pytest.mark.parametrize(("package", "budget"), BUDGETS.items())
def test_the_package_is_within_its_line_budget(package: str, budget: int) -> None:
    assert lines(package) <= budget, (
        f"chorus.{package} is {lines(package):,} lines, over its {budget:,}: put the new behaviour "
        "in a feature package that plugs in (a step, a control message, an observer, a worker)"
    )
