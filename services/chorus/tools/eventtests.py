"""Which test files name an event: its type (``"invoice.validated"``) or a model class of any
of its versions (``InvoiceValidated``, ``InvoiceValidatedV1``), found by a plain text scan.

The folders are the checkout's ``tests/``, ``contracts-tests/`` and ``examples/*/tests/``,
and a project's own ``tests/`` beside its registry. Installed from a wheel there is no
checkout: only the project's tests are found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from chorus.contracts.registry import Registry, platform_schemas_dir


def repository_root() -> Path | None:
    """The checkout of Chorus this tool runs from, or None (installed from a wheel)."""
    root = platform_schemas_dir().resolve().parent
    return root if (root / "contracts-tests").is_dir() else None


def project_root(registry: Registry) -> Path | None:
    """The folder of a project's registry (its ``schemas/``'s parent); None for the platform's."""
    return registry.root.resolve().parent if registry.project is not None else None


def folders_of_tests(registry: Registry) -> list[Path]:
    """Where the tests of ``registry``'s events are: the checkout's and the project's."""
    folders: list[Path] = []
    repo = repository_root()
    if repo is not None:
        folders += [repo / "tests", repo / "contracts-tests", *sorted(repo.glob("examples/*/tests"))]
    project = project_root(registry)
    if project is not None:
        folders.append(project / "tests")
    unique = dict.fromkeys(f for f in folders if f.is_dir())
    return [f for f in unique if not any(p != f and f.is_relative_to(p) for p in unique)]


def tests_naming(folders: Iterable[Path], names: Mapping[str, Iterable[str]]) -> dict[str, list[Path]]:
    """Event type -> the ``*.py`` files under ``folders`` that name it (``names``: event
    type -> its class names), each list sorted."""
    owner = {name: event_type for event_type, spelled in names.items() for name in spelled}
    owner.update({event_type: event_type for event_type in names})
    types = _alternation(n for n in owner if "." in n)
    classes = _alternation(n for n in owner if "." not in n)
    pattern = re.compile(rf"(?<![\w.])(?:{types})(?!\w)|\b(?:{classes})\b")
    found: dict[str, list[Path]] = {event_type: [] for event_type in names}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            for event_type in sorted({owner[m.group(0)] for m in pattern.finditer(text)}):
                found[event_type].append(path)
    return {event_type: sorted(paths) for event_type, paths in found.items()}


def _alternation(words: Iterable[str]) -> str:
    # Longest first, so that a name is never cut short by a shorter one it starts with.
    ordered = sorted(set(words), key=lambda w: (-len(w), w))
    return "|".join(re.escape(w) for w in ordered) or "(?!)"
