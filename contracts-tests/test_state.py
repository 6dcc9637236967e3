"""Checkpoint schemas: committed per state version, and the same as the models."""

from __future__ import annotations

import json

from state_schemas import STATE_DIR, state_files, state_specs

from chorus.tools.compat import STATE_FILE


def test_each_stateful_service_commits_the_schema_of_its_current_state_version() -> None:
    expected = state_files()
    assert len(expected) == len(state_specs()) >= 5  # the agents, the gate, the gateway, ...
    for name, text in expected.items():
        path = STATE_DIR / name
        assert path.exists(), f"schemas/state/{name} is missing: run make schemas"
        assert json.loads(path.read_text()) == json.loads(text), (
            f"schemas/state/{name} is not what the model generates: if the model changed, raise the "
            "service's state_version with a migration; then make schemas"
        )


def test_no_state_schema_file_is_ahead_of_its_service() -> None:
    current = {name: spec.state_version for name, spec in state_specs().items()}
    for path in STATE_DIR.glob("*.schema.json"):
        found = STATE_FILE.fullmatch(f"state/{path.name}")
        assert found is not None, f"schemas/state/{path.name}: not <service>.v<N>.schema.json"
        service, version = found.group(1), int(found.group(2))
        assert service in current, f"schemas/state/{path.name}: no service {service} keeps state"
        assert version <= current[service], f"schemas/state/{path.name}: {service} is at v{current[service]}"
