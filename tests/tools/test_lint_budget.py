"""The function-size rules only ever tighten: a file listed as an exception must still need it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # tomllib is 3.11's; tomli is the same parser, packaged for older versions
    import tomli as tomllib

from tests.support.processes import run_captured

ROOT = Path(__file__).resolve().parents[2]
SIZE_RULES = {"PLR0912", "PLR0915"}  # too many branches, too many statements


def exceptions() -> dict[str, set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ignores: dict[str, list[str]] = config["tool"]["ruff"]["lint"].get("per-file-ignores", {})
    return {path: set(codes) & SIZE_RULES for path, codes in ignores.items() if set(codes) & SIZE_RULES}


def violations(path: str, codes: set[str]) -> set[str]:
    ruff = str(Path(sys.executable).parent / "ruff")
    proc = run_captured(
        [ruff, "check", "--isolated", "--select", ",".join(sorted(codes)), "--output-format=json", path],
        cwd=ROOT,
    )
    return {v["code"] for v in json.loads(proc.stdout)}


@pytest.mark.parametrize("path", sorted(exceptions()))
def test_a_listed_file_still_has_the_functions_it_is_excused_for(path: str) -> None:
    codes = exceptions()[path]
    assert (ROOT / path).exists(), f"{path} is gone: remove it from [tool.ruff.lint.per-file-ignores]"
    unneeded = codes - violations(path, codes)
    assert not unneeded, f"{path} no longer needs {sorted(unneeded)}: remove them from pyproject.toml"


def test_nothing_in_the_kernel_is_excused() -> None:
    inside = ("services/chorus/kernel/", "services/chorus/base/")
    assert [path for path in exceptions() if path.startswith(inside)] == []
