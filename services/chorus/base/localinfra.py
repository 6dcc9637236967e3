"""The settings of a project's own Kafka and PostgreSQL, which ``chorus dev infra up``
records in ``.chorus/infra.env``: every ``chorus`` command run in the project and its
generated tests' ``conftest.py`` take them as defaults, so a reader's shell needs nothing
exported (as ``docker compose`` reads a project's ``.env``). A variable set in the
environment always wins: a project never overrides where someone pointed it on purpose.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

INFRA_ENV = Path(".chorus") / "infra.env"
"""Where, under a project's root, ``chorus dev infra up`` writes its settings."""


def read_env_file(path: Path) -> dict[str, str]:
    """NAME=value lines of an env file (comments and blank lines skipped)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            found[name.strip()] = value.strip()
    return found


def project_infra_env(root: Path) -> dict[str, str]:
    """The settings ``chorus dev infra up`` recorded for the project at ``root`` ({} if none)."""
    path = root / INFRA_ENV
    return read_env_file(path) if path.is_file() else {}


def use_project_infra(start: Path, environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Default ``environ`` to the recorded settings of the project ``start`` is in (the
    nearest folder up with ``schemas/project.yaml``); what it set, by name. Nothing is
    parsed but the env file: a broken registry is for the command at hand to report."""
    root = next((f for f in (start, *start.parents) if (f / "schemas" / "project.yaml").is_file()), None)
    if root is None:
        return {}
    added = {name: value for name, value in project_infra_env(root).items() if name not in environ}
    environ.update(added)
    return added
