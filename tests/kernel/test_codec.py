"""decode(): every way bytes can be wrong gets its own error, naming the field."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from chorus.base.errors import (
    NotJSONError,
    OversizeError,
    SchemaValidationError,
    UnknownEventTypeError,
    UnknownVersionError,
)
from chorus.contracts.registry import Registry, default_registry, default_schemas_dir
from chorus.kernel.codec import decode


@pytest.fixture(scope="module")
def registry() -> Registry:
    return default_registry()


def timer_schedule() -> dict[str, Any]:
    example = default_registry().examples[("timer.schedule", 1)][0]
    body: dict[str, Any] = json.loads(json.dumps(example.body))
    body["event_id"] = str(uuid.uuid4())
    return body


def test_a_valid_event_decodes_to_typed_models(registry: Registry) -> None:
    event = decode(json.dumps(timer_schedule()).encode(), registry)
    assert event.event_type == "timer.schedule"
    assert event.payload.due_at.tzinfo is not None  # type: ignore[attr-defined]


def test_non_json_bytes(registry: Registry) -> None:
    with pytest.raises(NotJSONError):
        decode(b"\x00\x01binary", registry)
    with pytest.raises(NotJSONError, match="not a JSON object"):
        decode(b"[1, 2]", registry)


def test_oversize_record(registry: Registry) -> None:
    with pytest.raises(OversizeError, match="at most 100 bytes"):
        decode(json.dumps(timer_schedule()).encode(), registry, max_bytes=100)


def test_unknown_event_type_suggests_close_names(registry: Registry) -> None:
    body = timer_schedule() | {"event_type": "timer.schedul"}
    with pytest.raises(UnknownEventTypeError, match=r"did you mean timer\.schedule"):
        decode(json.dumps(body).encode(), registry)


def test_unknown_version(registry: Registry) -> None:
    body = timer_schedule() | {"schema_version": 9}
    with pytest.raises(UnknownVersionError) as err:
        decode(json.dumps(body).encode(), registry)
    assert err.value.pointer == "/schema_version"


def test_wrong_type_in_a_nested_field_names_it_with_a_json_pointer(registry: Registry) -> None:
    body = timer_schedule()
    body["payload"]["fire"]["key"] = 42
    with pytest.raises(SchemaValidationError) as err:
        decode(json.dumps(body).encode(), registry)
    assert err.value.pointer == "/payload/fire/key"
    assert err.value.expected == "string_type"
    assert err.value.got == "42"
    assert "/payload/fire/key" in str(err.value)


def test_envelope_errors_point_into_the_envelope(registry: Registry) -> None:
    body = timer_schedule()
    body["producer"]["service"] = ""
    with pytest.raises(SchemaValidationError) as err:
        decode(json.dumps(body).encode(), registry)
    assert err.value.pointer == "/producer/service"


def test_naive_timestamps_are_refused(registry: Registry) -> None:
    body = timer_schedule()
    body["payload"]["due_at"] = datetime(2026, 1, 1).isoformat()
    with pytest.raises(SchemaValidationError) as err:
        decode(json.dumps(body).encode(), registry)
    assert err.value.pointer == "/payload/due_at"
    assert datetime.now(timezone.utc)  # UTC offsets are what the error asks for


def test_dead_letter_topics_take_records_as_large_as_the_topic_allows(registry: Registry) -> None:
    # A dead letter carries the whole original record, so its consumers (live or replay)
    # must accept up to the topic's max_message_bytes, not just their own limit.
    assert registry.size_limit("chorus.deadletters", 65_536) == 8_388_608
    assert registry.size_limit("chorus.timers", 65_536) == 8_388_608  # retries carry originals too
    assert registry.size_limit("procurement.events", 65_536) == 65_536
    assert registry.size_limit("no.such.topic", 65_536) == 65_536


def test_the_registry_is_the_one_of_the_project_the_command_runs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "my-agents"
    (project / "schemas" / "topics").mkdir(parents=True)
    (project / "services" / "deep").mkdir(parents=True)
    monkeypatch.delenv("CHORUS_SCHEMAS_DIR", raising=False)
    monkeypatch.chdir(project / "services" / "deep")
    assert default_schemas_dir() == (project / "schemas").resolve()
    monkeypatch.setenv("CHORUS_SCHEMAS_DIR", str(tmp_path / "elsewhere"))
    assert default_schemas_dir() == tmp_path / "elsewhere"


def test_an_old_version_invalid_as_written_is_refused_even_where_the_upcaster_drops_the_fault(
    registry: Registry,
) -> None:
    body = json.loads((default_schemas_dir() / "examples/invoice.validated/1/example-1.json").read_text())
    body["payload"]["cost_center"] = "not a reference"  # v2 has no cost center: the upcaster drops it
    with pytest.raises(SchemaValidationError) as err:
        decode(json.dumps(body).encode(), registry, accept={"invoice.validated": 2})
    assert err.value.pointer == "/payload/cost_center"
    body["payload"]["cost_center"] = "cc-research"
    upcast = decode(json.dumps(body).encode(), registry, accept={"invoice.validated": 2})
    assert (upcast.received_version, upcast.payload.version) == (1, 2)
