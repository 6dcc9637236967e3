"""The contracts of a project of one's own, held as the platform's are: examples/support
(the third reference workflow). Its registry is the union with the platform's; its
services' edges match what the union grants them (their topics' files, and for platform
topics the project's principals: a project may not edit the platform's topic files)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from chorus.contracts.registry import (
    RUNTIME_PRODUCER,
    contract_catalog,
    generated_files,
    load_registry,
    read_project,
)
from chorus.kernel.codec import decode
from chorus.kernel.service import ServiceSpec
from chorus.tools.devstack import project_services

# The checkout's (not a path derived from where chorus is installed: the wheel ships no examples).
REFERENCE_PROJECT = Path(__file__).resolve().parents[1] / "examples" / "support"
SCHEMAS = REFERENCE_PROJECT / "schemas"
REGISTRY = load_registry(SCHEMAS)  # imports the project's event models (its services/ on the path)
FOUND = read_project(SCHEMAS)
assert FOUND is not None
PROJECT = FOUND
SPECS: dict[str, ServiceSpec[Any, Any]] = {
    name: importlib.import_module(f"{name}.service").SPEC for name in project_services(REFERENCE_PROJECT)
}
OWN_TOPICS = {t for t, spec in REGISTRY.topics.items() if spec.owner == PROJECT.name}


def test_the_project_has_services_and_topics_of_its_own() -> None:
    assert SPECS and OWN_TOPICS and set(PROJECT.contracts) == {"support_contracts"}


@pytest.mark.parametrize("name", sorted(generated_files(SCHEMAS)))
def test_committed_schema_is_what_the_models_generate(name: str) -> None:
    path: Path = SCHEMAS / name
    assert path.exists() and path.read_text() == generated_files(SCHEMAS)[name], (
        f"{path} differs from its model: run `chorus schemas generate` in the project"
    )


@pytest.mark.parametrize("key", sorted(contract_catalog(PROJECT.contracts)), ids=lambda k: f"{k[0]}.v{k[1]}")
def test_every_event_of_the_project_has_its_topic_schema_and_a_valid_example(key: tuple[str, int]) -> None:
    event_type, version = key
    assert REGISTRY.topic_for(event_type).topic in OWN_TOPICS, (
        f"{event_type} is not on a topic of the project"
    )
    examples = REGISTRY.examples.get(key, [])
    assert examples, f"{event_type} v{version}: no example"
    for example in examples:
        checker = FormatChecker()
        Draft202012Validator(REGISTRY.envelope_schema, format_checker=checker).validate(example.body)
        Draft202012Validator(REGISTRY.schemas[key], format_checker=checker).validate(example.body["payload"])
        assert decode(json.dumps(example.body).encode(), REGISTRY).event_type == event_type


@pytest.mark.parametrize("name", sorted(SPECS))
def test_what_a_service_consumes_and_produces_is_what_the_union_grants_it(name: str) -> None:
    edges = SPECS[name].edges()
    principal = REGISTRY.principals.services[name]
    granted_reads = {t for t, s in REGISTRY.topics.items() if name in s.consumers} | set(principal.reads)
    granted_writes = {t for t, s in REGISTRY.topics.items() if name in s.producers} | set(principal.writes)
    reads = {REGISTRY.topic_for(t).topic for t in edges.consumes}
    writes = {REGISTRY.topic_for(t).topic for t in edges.produces}
    assert reads <= granted_reads, f"{name} reads {sorted(reads - granted_reads)} without a grant"
    assert writes <= granted_writes, f"{name} writes {sorted(writes - granted_writes)} without a grant"
    # Nothing granted that the code does not use (least privilege), beyond the runtime's own.
    assert granted_reads - reads == set() and granted_writes - writes == set()
    assert RUNTIME_PRODUCER not in {*granted_reads, *granted_writes}
