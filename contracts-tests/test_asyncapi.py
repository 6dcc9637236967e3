"""schemas/asyncapi.yaml: current, a well-formed AsyncAPI 3.0 document, and complete.

No package on PyPI ships the official AsyncAPI 3.0 JSON Schema (only object models),
so validity is checked structurally here: the fields AsyncAPI 3.0 requires, the
shapes it constrains (operations reference their channel and a subset of its
messages), every ``$ref`` resolving inside the document, and every registry
example validating against the message payload the document describes.
"""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry as RefRegistry
from referencing import Resource
from referencing.jsonschema import DRAFT7
from typer.testing import CliRunner

from chorus.contracts.registry import RUNTIME_PRODUCER, Registry, load_registry
from chorus.tools.asyncapi import DOCUMENT_FILE, message_id, operation_id, render
from chorus.tools.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "schemas"
COMPONENT_KEY = re.compile(r"^[\w\d.\-_]+$")  # AsyncAPI 3.0 components.* keys
EXTENSION_KEY = re.compile(r"^x-[\w\d.\-_]+$")
DOC_URI = "urn:chorus:asyncapi"


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry(SCHEMAS)


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    body = yaml.safe_load((SCHEMAS / DOCUMENT_FILE).read_text())
    assert isinstance(body, dict)
    return body


def test_committed_document_is_what_the_registry_generates(registry: Registry) -> None:
    committed = (SCHEMAS / DOCUMENT_FILE).read_text()
    assert committed == render(registry), "schemas/asyncapi.yaml is stale: run make docs"


def test_a_stale_document_is_reported_with_the_fix(tmp_path: Path) -> None:
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMAS, copy)
    topic = next((copy / "topics").glob("*.yaml"))
    spec = yaml.safe_load(topic.read_text())
    spec["partitions"] += 1
    topic.write_text(yaml.safe_dump(spec, sort_keys=False))

    stale = CliRunner().invoke(app, ["schemas", "asyncapi", "--check", "--schemas-dir", str(copy)])
    fixed = CliRunner().invoke(app, ["schemas", "asyncapi", "--schemas-dir", str(copy)])
    again = CliRunner().invoke(app, ["schemas", "asyncapi", "--check", "--schemas-dir", str(copy)])

    assert stale.exit_code == 1
    assert "stale: run make docs" in stale.output
    assert fixed.exit_code == 0, fixed.output
    assert again.exit_code == 0, again.output
    assert f"partitions: {spec['partitions']}" in (copy / DOCUMENT_FILE).read_text()


def test_required_fields_of_asyncapi_3(document: dict[str, Any]) -> None:
    assert document["asyncapi"] == "3.0.0"
    assert isinstance(document["info"]["title"], str) and document["info"]["title"]
    assert isinstance(document["info"]["version"], str) and document["info"]["version"]
    allowed_root = {
        "asyncapi",
        "id",
        "info",
        "servers",
        "defaultContentType",
        "channels",
        "operations",
        "components",
    }
    assert {k for k in document if not EXTENSION_KEY.match(k)} <= allowed_root
    for name, server in document["servers"].items():
        assert {"host", "protocol"} <= server.keys(), name
    for name, channel in document["channels"].items():
        assert isinstance(channel.get("address"), str), name
        for message in channel["messages"].values():
            assert set(message) == {"$ref"}, name
    for section, entries in document["components"].items():
        for key in entries:
            assert COMPONENT_KEY.match(key), f"components.{section}.{key}"
    for name, message in document["components"]["messages"].items():
        assert "payload" in message, name
        assert message["contentType"] == "application/json", name


def test_operations_reference_their_channel_and_its_messages(document: dict[str, Any]) -> None:
    for name, operation in document["operations"].items():
        assert operation["action"] in ("send", "receive"), name
        channel_ref = operation["channel"]["$ref"]
        assert channel_ref.startswith("#/channels/"), name
        channel = resolve(document, channel_ref)
        assert operation["messages"], name
        for message in operation["messages"]:
            # AsyncAPI 3.0: an operation's messages are a subset of its channel's.
            assert message["$ref"].startswith(channel_ref + "/messages/"), name
            assert resolve(document, message["$ref"]) in channel["messages"].values()


def test_every_ref_resolves(document: dict[str, Any]) -> None:
    refs = list(all_refs(document))
    assert refs
    for ref in refs:
        assert ref.startswith("#/"), f"{ref} points outside the document"
        assert resolve(document, ref) is not None, f"{ref} does not resolve"


def test_schemas_are_valid_and_examples_match_their_message(
    document: dict[str, Any], registry: Registry
) -> None:
    for name, schema in document["components"]["schemas"].items():
        try:
            Draft7Validator.check_schema(schema)
        except SchemaError as exc:
            pytest.fail(f"components.schemas.{name} is not a JSON Schema: {exc.message}")
    refs = RefRegistry().with_resource(
        DOC_URI, Resource.from_contents(document, default_specification=DRAFT7)
    )
    checked = 0
    for (event_type, version), examples in registry.examples.items():
        mid = message_id(event_type, version)
        payload = {"$ref": f"{DOC_URI}#/components/messages/{mid}/payload"}
        validator = Draft7Validator(payload, registry=refs)
        for example in examples:
            errors = [e.message for e in validator.iter_errors(example.body)]
            assert not errors, f"{example.path}: {errors}"
            checked += 1
    assert checked, "the registry has no examples to check the document against"


def test_a_payload_missing_a_required_field_is_rejected(document: dict[str, Any], registry: Registry) -> None:
    (event_type, version), examples = sorted(registry.examples.items())[0]
    required = registry.schemas[(event_type, version)]["required"][0]
    broken = copy.deepcopy(examples[0].body)
    del broken["payload"][required]
    refs = RefRegistry().with_resource(
        DOC_URI, Resource.from_contents(document, default_specification=DRAFT7)
    )
    payload = {"$ref": f"{DOC_URI}#/components/messages/{message_id(event_type, version)}/payload"}

    errors = [e.message for e in Draft7Validator(payload, registry=refs).iter_errors(broken)]

    assert any(required in message for message in errors), errors


def test_every_topic_message_producer_and_consumer_is_documented(
    document: dict[str, Any], registry: Registry
) -> None:
    for topic, spec in registry.topics.items():
        channel = document["channels"][topic]
        assert channel["address"] == topic
        assert channel["x-owner"] == spec.owner
        assert channel["x-physical-topics"] == spec.physical_topics()
        kafka = channel["bindings"]["kafka"]
        assert kafka["partitions"] == spec.partitions
        assert kafka["topicConfiguration"]["retention.ms"] == spec.retention_ms
        assert kafka["topicConfiguration"]["cleanup.policy"] == spec.cleanup_policy.split(",")
        if spec.lanes:
            for physical in spec.physical_topics():
                assert physical in channel["description"]
        for event in spec.events:
            for version in event.versions:
                mid = message_id(event.type, version)
                assert mid in channel["messages"], f"{event.type} v{version} not on {topic}"
                message = document["components"]["messages"][mid]
                assert message["name"] == event.type
                assert message["x-version"] == version
                key = message["bindings"]["kafka"]["key"]
                assert spec.message_key in key["description"]
        for action, services in (("send", spec.producers), ("receive", spec.consumers)):
            for service in services:
                operation = document["operations"][operation_id(service, action, topic)]
                assert operation["action"] == action
                assert operation["x-service"] == service
                if service == RUNTIME_PRODUCER:
                    assert "every service" in operation["description"]


def resolve(document: dict[str, Any], ref: str) -> Any:
    node: Any = document
    for raw in ref.removeprefix("#/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def all_refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            elif key != "examples":  # example payloads are data, not schema
                yield from all_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from all_refs(item)


def test_the_architecture_pictures_are_what_the_registry_draws() -> None:
    from chorus.tools import diagrams

    committed = ROOT / diagrams.DOCUMENT
    assert committed.exists(), "docs/architecture.md is missing: run make docs"
    assert committed.read_text() == diagrams.render(load_registry(ROOT / "schemas")), (
        "docs/architecture.md is stale: run make docs"
    )
