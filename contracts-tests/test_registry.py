"""The registry as a whole: schemas, examples, topics, versions. Parametrized over everything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator, FormatChecker

from chorus.contracts.base import EventModel
from chorus.contracts.registry import (
    RUNTIME_PRODUCER,
    contract_catalog,
    generated_files,
    load_registry,
    personal_pointers,
    upcaster_gaps,
)
from chorus.kernel.codec import decode
from tests.support.registry import unsigned_starts

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "schemas"
REGISTRY = load_registry(SCHEMAS)


def contract_models() -> dict[tuple[str, int], type[EventModel]]:
    """The catalog without test-only events (tests register their own on test topics)."""
    return contract_catalog()


def all_examples() -> list[Any]:
    return [
        pytest.param(key, example, id=f"{key[0]}.v{key[1]}/{example.path.name}")
        for key, examples in sorted(REGISTRY.examples.items())
        for example in examples
    ]


@pytest.mark.parametrize("name", sorted(generated_files()))
def test_committed_schema_is_what_the_models_generate(name: str) -> None:
    path = SCHEMAS / name
    assert path.exists(), f"{name} is missing: run make schemas"
    assert path.read_text() == generated_files()[name], (
        f"schemas/{name} differs from its model in services/chorus/contracts: "
        "change the model, then run make schemas (the JSON Schema is generated)"
    )


def test_no_stale_schema_files() -> None:
    committed = {f"events/{p.name}" for p in (SCHEMAS / "events").glob("*.schema.json")}
    generated = {n for n in generated_files() if n.startswith("events/")}
    assert committed - generated == set(), "schema files without a model: run make schemas"


@pytest.mark.parametrize(
    "key", sorted(REGISTRY.schemas), ids=lambda k: f"{k[0]}.v{k[1]}" if isinstance(k, tuple) else k
)
def test_every_schema_is_valid_json_schema_2020_12(key: tuple[str, int]) -> None:
    schema = REGISTRY.schemas[key]
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == f"{key[0].replace('.', '_')}_v{key[1]}"  # snake_case titles


def test_envelope_schema_is_valid() -> None:
    Draft202012Validator.check_schema(REGISTRY.envelope_schema)


@pytest.mark.parametrize(("key", "example"), all_examples())
def test_every_example_validates(key: tuple[str, int], example: Any) -> None:
    body = example.body
    assert (body["event_type"], body["schema_version"]) == key, "example stored under the wrong type/version"
    checker = FormatChecker()
    Draft202012Validator(REGISTRY.envelope_schema, format_checker=checker).validate(body)
    Draft202012Validator(REGISTRY.schemas[key], format_checker=checker).validate(body["payload"])
    event = decode(json.dumps(body).encode(), REGISTRY)
    assert event.envelope.workflow_id == body["workflow_id"]
    # The model reads back what the example says (nothing dropped or coerced).
    assert event.payload.model_dump(mode="json") == json.loads(
        type(event.payload).model_validate(body["payload"]).model_dump_json()
    )


@pytest.mark.parametrize("key", sorted(contract_models()), ids=lambda k: f"{k[0]}.v{k[1]}")
def test_every_event_version_has_a_topic_a_schema_and_an_example(key: tuple[str, int]) -> None:
    event_type, version = key
    assert REGISTRY.knows(event_type), f"{event_type} is on no topic in schemas/topics (orphan)"
    assert version in REGISTRY.versions(event_type), (
        f"{event_type} v{version} has a model but its topic does not list the version"
    )
    assert key in REGISTRY.schemas, f"{event_type} v{version}: no schema file (run make schemas)"
    assert REGISTRY.examples.get(key), (
        f"{event_type} v{version}: add an example under schemas/examples/{event_type}/{version}/"
    )


def test_every_topic_event_has_a_model() -> None:
    models = contract_models()
    missing = [
        f"{ev.type} v{v} (topic {spec.topic})"
        for spec in REGISTRY.topics.values()
        for ev in spec.events
        for v in ev.versions
        if (ev.type, v) not in models
    ]
    assert missing == [], f"declared on a topic but no model in chorus.contracts: {missing}"


@pytest.mark.parametrize("topic", sorted(REGISTRY.topics))
def test_every_topic_has_an_owner_a_producer_and_a_consumer(topic: str) -> None:
    spec = REGISTRY.topics[topic]
    assert spec.owner, f"{topic} has no owner"
    if not spec.external:
        assert spec.producers, f"{topic} has no producer (declare it external if it comes from outside)"
        assert spec.consumers, f"{topic} has no consumer (declare it external if it goes outside)"
    assert spec.message_key == "workflow_id", f"{topic}: events of a workflow must share a key"


def test_every_version_chain_has_upcasters() -> None:
    assert upcaster_gaps() == []


def test_runtime_pseudo_producer_only_on_platform_topics() -> None:
    runtime_topics = {t for t, s in REGISTRY.topics.items() if RUNTIME_PRODUCER in s.producers}
    assert runtime_topics <= {
        "chorus.timers",
        "chorus.control",
        "chorus.data",
        "chorus.deadletters",
        "chorus.reviews",
        "chorus.releases",
        "chorus.resets",
        "chorus.agents",
    }


def test_the_registry_loader_rejects_an_event_on_two_topics(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy)
    extra = (
        (copy / "topics" / "chorus.timers.yaml")
        .read_text()
        .replace("topic: chorus.timers", "topic: chorus.timers2")
    )
    (copy / "topics" / "chorus.timers2.yaml").write_text(extra)
    with pytest.raises(ValueError, match="declared on two topics"):
        load_registry(copy)


def test_a_projects_service_joins_the_signers_of_what_it_says_it_states() -> None:
    project = load_registry(ROOT / "examples" / "support" / "schemas")
    assert "triage_agent" in project.signers_of("workflow.ended")
    assert "triage_agent" not in REGISTRY.signers_of("workflow.ended")  # the platform's alone
    assert project.signers_of("approval.decided") == {"approval_gate"}
    assert "triage_agent" in project.signers()


@pytest.mark.parametrize(
    ("signs", "writes", "refused"),
    [
        (
            "invoice.received",
            "procurement.events",
            "signs invoice.received, which is not a signed event type",
        ),
        ("workflow.ended", "approvals.events", "signs workflow.ended but does not write workflows.lifecycle"),
    ],
)
def test_a_service_may_not_sign_an_unsigned_type_or_one_whose_topic_it_does_not_write(
    tmp_path: Path, signs: str, writes: str, refused: str
) -> None:
    import shutil

    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy)
    # Every type of the platform is signed: a project's may leave its start request unsigned.
    unsigned_starts(copy)
    principals = yaml.safe_load((copy / "principals.yaml").read_text())
    principals["services"]["source_fetcher"] = {"kind": "runtime", "writes": [writes], "signs": [signs]}
    (copy / "principals.yaml").write_text(yaml.safe_dump(principals))
    with pytest.raises(ValueError, match=f"source_fetcher {refused}"):
        load_registry(copy)


# What the reference workflows' events carry about people: the fields erasure and
# minimisation start from (issue 18). A field that becomes personal is marked here first.
PERSONAL_FIELDS: dict[tuple[str, int], list[str]] = {
    ("invoice.received", 1): ["/document_text"],
    ("invoice.received", 2): ["/document_text"],
    ("workflow.started", 1): ["/submitted_by"],
    ("workflow.ended", 1): ["/reason"],
    ("workflow.ended", 2): ["/reason"],
    ("workflow.cancel_requested", 1): ["/requested_by", "/reason"],
    ("invoice.line_added", 1): ["/sent_by", "/reason"],
    ("approval.requested", 1): ["/context"],
    ("approval.decision_submitted", 1): ["/comment", "/reviewer"],
    ("approval.decided", 1): ["/comment", "/decided_by"],
    ("retry.due", 1): ["/original"],
    ("event.dead_lettered", 1): ["/original"],
    ("event.dead_lettered", 2): ["/original"],
    ("agent.turn_recorded", 1): ["/said"],
    ("agent.output_streamed", 1): ["/text"],
}


def test_personal_data_is_marked_in_the_registry_and_nowhere_else() -> None:
    registry = load_registry(ROOT / "schemas")
    marked = {
        key: pointers
        for key in sorted(registry.schemas)
        if (pointers := personal_pointers(registry.schemas[key]))
    }
    assert marked == PERSONAL_FIELDS


def test_every_personal_mark_is_a_field_of_the_payload_itself() -> None:
    """The runtime seals the payload's own fields (chorus.privacy.crypto.Sealer): a mark inside an
    object would be left in clear, so mark the object instead."""
    registry = load_registry(ROOT / "schemas")
    nested = {
        key: pointers
        for key, schema in registry.schemas.items()
        if (pointers := [p for p in personal_pointers(schema) if p.count("/") != 1])
    }
    assert nested == {}


def test_the_asyncapi_document_shows_which_fields_are_personal() -> None:
    document = yaml.safe_load((ROOT / "schemas" / "asyncapi.yaml").read_text())
    payload = json.dumps(document)
    assert payload.count('"x-personal": true') >= len({p for ps in PERSONAL_FIELDS.values() for p in ps})
