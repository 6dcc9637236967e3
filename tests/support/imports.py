"""Which imports of Chorus a folder of code makes that are not its public surface."""

from __future__ import annotations

import ast
from pathlib import Path

from chorus.public import PUBLIC, is_public


def private_imports(
    folder: Path, allowed_modules: frozenset[str] = frozenset(), own_package: str | None = None
) -> list[str]:
    """``file: module.name`` for every import of Chorus from ``folder`` that is not public
    (the code's own package, ``own_package``, aside: a service inside the namespace)."""
    assert any(folder.rglob("*.py")), f"{folder} holds no Python code"
    found: list[str] = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                pairs = [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                pairs = [(alias.name, "*") for alias in node.names]
            else:
                continue
            for module, name in pairs:
                if module.split(".")[0] != "chorus":
                    continue
                if module in allowed_modules or is_public(module, name):
                    continue
                if own_package and (module == own_package or module.startswith(f"{own_package}.")):
                    continue
                if f"{module}.{name}" in PUBLIC:  # ``from chorus import migrations``
                    continue
                found.append(f"{path.relative_to(folder.parent)}: {module}.{name}")
    return found
