"""The checkpoint model of every stateful service as JSON Schema, one file per state
version: ``schemas/state/<service>.v<N>.schema.json``.

``make schemas`` writes the file of each service's current state version (older versions'
files stay: they are what checkpoints of those versions hold). The contract tests hold the
files to the models; ``chorus schemas check`` fails when a committed file changes in place
(a release still on that version would drop or misread the fields: a changed state needs a
new state version and a migration). It lives here, not in chorus.tools, because it imports
the services and the tooling never does.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from chorus.kernel.service import ServiceSpec
from chorus.tools.declarations import own_services, service_module

ROOT = Path(__file__).resolve().parents[1]
STATE_DIR = ROOT / "schemas" / "state"
LIBRARIES = {"chorus", "chorus.contracts", "chorus.tools"}


def state_specs() -> dict[str, ServiceSpec[Any, Any]]:
    """Every service whose SPEC keeps workflow state, by name."""
    found: dict[str, ServiceSpec[Any, Any]] = {}
    for name in own_services():
        spec = getattr(importlib.import_module(f"{service_module(name)}.service"), "SPEC", None)
        if isinstance(spec, ServiceSpec) and spec.state is not None:
            found[spec.name] = spec
    return found


def state_files() -> dict[str, str]:
    """File name -> the text it must hold, for each service's current state version."""
    return {
        f"{name}.v{spec.state_version}.schema.json": json.dumps(
            spec.state.model_json_schema(), indent=2, sort_keys=True, ensure_ascii=False
        )
        + "\n"
        for name, spec in sorted(state_specs().items())
        if spec.state is not None
    }


def write() -> list[str]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in state_files().items():
        path = STATE_DIR / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(f"state/{name}")
    return changed


if __name__ == "__main__":
    changed = write()
    for name in changed:
        print(f"wrote {name}")
    print(f"{len(changed)} state schema file(s) changed" if changed else "state schemas up to date")
