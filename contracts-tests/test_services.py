"""Every service's declared edges match the registry, and its handlers honour the contracts."""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from chorus.base.clock import ManualClock
from chorus.base.errors import ChorusError
from chorus.contracts.edges import ServiceEdges
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.registry import RUNTIME_PRODUCER, load_registry
from chorus.kernel.codec import decode, encode
from chorus.kernel.envelopes import child_envelope
from chorus.kernel.service import Context, ServiceSpec
from chorus.runtime.runner import RUNTIME_CONTROLS
from chorus.tools.declarations import own_services, service_module
from tests.support.fakes import handler_deps

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = load_registry(ROOT / "schemas")
RUNTIME_TOPICS = {REGISTRY.topic_for(m.event_type).topic for m in RUNTIME_CONTROLS} | {"chorus.rollouts"}
"""What every runtime service reads beside its handlers' topics: the control messages its
runtime answers (retries, discards, re-pins, data requests, resets), and the rollout
policies (chorus.rollouts.RolloutFollower)."""
TABLE_TOPICS = {"chorus.rollouts"}
"""Read as a table (the latest record per key), never handled: nothing read there is
dead-lettered (a record that is not the rollout service's signed policy is skipped)."""
OWN = own_services()
"""Chorus's own services (the platform's and the reference workflows'): name -> folder."""


def discover() -> dict[str, tuple[ServiceEdges, ServiceSpec[Any, Any] | None]]:
    """Every service.py of Chorus's own services exposing SPEC (runtime) or EDGES (other)."""
    found: dict[str, tuple[ServiceEdges, ServiceSpec[Any, Any] | None]] = {}
    for name, folder in OWN.items():
        mod = importlib.import_module(f"{service_module(name)}.service")
        spec = getattr(mod, "SPEC", None)
        if isinstance(spec, ServiceSpec):
            found[spec.name] = (spec.edges(), spec)
        elif isinstance(getattr(mod, "EDGES", None), ServiceEdges):
            found[mod.EDGES.name] = (mod.EDGES, None)
        else:
            raise AssertionError(f"{folder}/service.py declares neither SPEC nor EDGES")
    return found


SERVICES = discover()


def declared(role: str, service: str, runtime: bool) -> set[str]:
    """Topics where the registry lists ``service`` (or, for runtime services, chorus-runtime)."""
    names = {service} | ({RUNTIME_PRODUCER} if runtime else set())
    return {t for t, spec in REGISTRY.topics.items() if names & set(getattr(spec, role))}


def test_services_are_discovered() -> None:
    assert "timer_service" in SERVICES


def test_every_service_the_registry_names_exists() -> None:
    named = {
        name for spec in REGISTRY.topics.values() for name in (*spec.producers, *spec.consumers, spec.owner)
    } - {RUNTIME_PRODUCER}
    assert named - set(SERVICES) == set(), "the registry names services that do not exist"


def topics_in_code(name: str, event_types: Iterable[str], does: str) -> set[str]:
    """The topics of ``event_types`` (what ``name`` ``does``), every one known to the registry."""
    unknown = [t for t in event_types if not REGISTRY.knows(t)]
    assert unknown == [], f"{name} {does} event types the registry does not know: {unknown}"
    return {REGISTRY.topic_for(t).topic for t in event_types}


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_consumed_topics_match_the_registry(name: str) -> None:
    edges, _ = SERVICES[name]
    from_code = topics_in_code(name, edges.consumes, "handles")
    if edges.runtime:
        from_code |= RUNTIME_TOPICS
    from_registry = declared("consumers", name, edges.runtime)
    assert from_code == from_registry, (
        f"{name}: code consumes {sorted(from_code)}, registry lists it as consumer of {sorted(from_registry)}"
    )


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_produced_topics_match_the_registry(name: str) -> None:
    edges, _ = SERVICES[name]
    from_code = topics_in_code(name, edges.produces, "emits")
    from_registry = declared("producers", name, runtime=False)  # the runtime's own events aside
    assert from_code == from_registry, (
        f"{name}: code produces onto {sorted(from_code)}, "
        f"registry lists it as producer of {sorted(from_registry)}"
    )


def handler_cases() -> list[Any]:
    cases = []
    for name, (_, spec) in sorted(SERVICES.items()):
        if spec is None:
            continue
        for handler in spec.handlers:
            event_type = handler.event.event_type
            for version in REGISTRY.versions(event_type):
                if version > handler.event.version:
                    continue
                for example in REGISTRY.examples.get((event_type, version), []):
                    cases.append(
                        pytest.param(
                            name,
                            event_type,
                            example,
                            id=f"{name}:{example.path.parent.parent.name}.v{version}/{example.path.name}",
                        )
                    )
    return cases


@pytest.mark.parametrize(("name", "event_type", "example"), handler_cases())
def test_consumer_accepts_every_example_of_every_version_it_claims(
    name: str, event_type: str, example: Any
) -> None:
    _, spec = SERVICES[name]
    assert spec is not None
    event = decode(json.dumps(example.body).encode(), REGISTRY, accept=spec.consumes())
    assert event.payload.version == spec.consumes()[event_type]


def emitted_validates(spec: ServiceSpec[Any, Any], outcome: Any, parent: Any) -> list[str]:
    """Build every emitted event as the runtime would and decode it back."""
    problems = []
    for index, item in enumerate(outcome.emit):
        model = getattr(item, "event", item)
        if model.event_type not in spec.produces:
            problems.append(f"emits undeclared {model.event_type}")
        child = child_envelope(
            parent,
            model,
            producer=ProducerRef(service=spec.name, version=spec.version),
            now=parent.occurred_at,
            position=f"contract/{index}",
        )
        decode(encode(child), REGISTRY)
    return problems


async def test_handlers_run_on_examples_emit_only_valid_declared_events() -> None:
    """Run every handler on every example of what it consumes (fresh workflow, offline deps).

    Handlers may refuse an example (a ChorusError, e.g. an approval for a workflow
    they never saw); whatever they do emit must be declared and must validate.
    """
    ran: dict[str, int] = {}
    problems: list[str] = []
    for name, (_, spec) in sorted(SERVICES.items()):
        if spec is None or not spec.handlers:
            continue  # not on the runtime, or no workflow events (the key service)
        ran[name] = 0
        async with handler_deps(name) as deps:
            for handler in spec.handlers:
                key = (handler.event.event_type, handler.event.version)
                for example in REGISTRY.examples.get(key, []):
                    event = decode(json.dumps(example.body).encode(), REGISTRY, accept=spec.consumes())
                    ctx: Context[Any] = Context(
                        service=name,
                        deps=deps,
                        clock=ManualClock(event.envelope.occurred_at),
                        envelope=event.envelope,
                        attempt=1,
                        feedback=[],
                        log=logging.LoggerAdapter(logging.getLogger(name)),
                        _checkpoint=_no_checkpoint,
                    )
                    try:
                        outcome = await handler.handler(event, None, ctx)
                    except ChorusError:
                        continue
                    ran[name] += 1
                    problems += [
                        f"{name} on {example.path.name}: {p}"
                        for p in emitted_validates(spec, outcome, event.envelope)
                    ]
    assert problems == []
    idle = [n for n, count in ran.items() if count == 0]
    assert idle == [], f"no handler of {idle} accepted any example; add examples it can handle"


async def _no_checkpoint(_: Any, __: Any) -> None:
    return None


# -- boundaries ---------------------------------------------------------------------------------

SKELETON = (
    "config.py",
    "domain.py",
    "handlers.py",
    "adapters",
    "bootstrap.py",
    "service.py",
    "__main__.py",
    "README.md",
)
SERVICE_DIRS = sorted(OWN)


@pytest.mark.checkout  # the skeleton of the sources: a wheel ships no README
@pytest.mark.parametrize("name", SERVICE_DIRS)
def test_every_service_has_the_same_skeleton(name: str) -> None:
    folder = ROOT / "services" / Path(*service_module(name).split("."))
    missing = [part for part in SKELETON if not (folder / part).exists()]
    assert missing == [], f"{folder.relative_to(ROOT)} lacks {missing} (see ../shared/STYLE.md)"


def _strings(path: Path) -> list[str]:
    import ast

    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


@pytest.mark.parametrize("name", SERVICE_DIRS)
def test_no_service_names_another_services_tables(name: str) -> None:
    """A service's tables are its own: no string in its code (its SQL) names another
    service's schema. (Imports across services are refused by the import contracts.)"""
    import re

    others = [o for o in SERVICE_DIRS if o != name]
    pattern = re.compile(rf"\b({'|'.join(others)})\.[a-z_]+")
    found = [
        f"{path.relative_to(ROOT)}: {match.group()}"
        for path in sorted(OWN[name].rglob("*.py"))
        for text in _strings(path)
        for match in pattern.finditer(text)
        if not text.startswith(("python -m", "from ", "import "))
    ]
    assert found == []


def test_the_audit_projector_waits_for_every_runtime_service_to_confirm_an_erasure() -> None:
    from chorus.platform.audit_projector.config import Settings

    runtime = {name for name, (edges, _) in SERVICES.items() if edges.runtime}
    assert set(Settings().data_holders) == runtime


def test_the_principals_file_names_every_service_with_how_it_connects() -> None:
    named = {name: p.kind for name, p in REGISTRY.principals.services.items()}
    found = {
        name: "runtime" if spec is not None else "stream"
        for name, (edges, spec) in SERVICES.items()
        if edges.kafka
    }
    assert named == found, "schemas/principals.yaml must list every service (and only those) by kind"


def test_a_redrive_may_write_every_topic_a_runtime_service_reads() -> None:
    runtime = {name for name, p in REGISTRY.principals.services.items() if p.kind == "runtime"}
    read = {
        topic
        for topic, spec in REGISTRY.topics.items()
        if (runtime | {RUNTIME_PRODUCER}) & set(spec.consumers) and topic not in TABLE_TOPICS
    }
    writes = set(REGISTRY.principals.services["deadletter_service"].writes)
    assert read - writes == set(), "the dead-letter service could not redrive letters of these topics"


def test_a_signed_event_type_is_produced_by_its_signers_and_nobody_else() -> None:
    # A signed type from another service would be refused by every consumer (chorus.privacy.signing).
    assert REGISTRY.signed_by(), "the decision events are signed"
    runtime = {name for name, p in REGISTRY.principals.services.items() if p.kind == "runtime"}
    for event_type, signers in REGISTRY.signed_by().items():
        if event_type in REGISTRY.own_commands():  # each runtime service's, for itself (timers)
            # and of the analytics stream, which dead-letters what it cannot read as they do
            others = {n for n, p in REGISTRY.principals.services.items() if event_type in p.signs}
            assert signers == runtime | others, event_type
            continue
        producers = {name for name, (edges, _) in SERVICES.items() if event_type in edges.produces}
        if event_type in REGISTRY.retired():  # read from older records, produced by no one
            assert producers == set(), (event_type, producers)
            continue
        assert producers == signers, (event_type, producers)


STATEFUL = sorted(name for name, (_, spec) in SERVICES.items() if spec is not None and spec.state is not None)


@pytest.mark.parametrize("name", STATEFUL)
def test_state_migrations_lead_forward_from_every_older_version_to_the_current_one(name: str) -> None:
    """A checkpoint of any older state version can be brought up to this code's (a step
    per version, none missing), and no step starts at or beyond it (the runtime migrates
    forward only; newer checkpoints are refused, chorus.base.errors.NewerStateError)."""
    spec = SERVICES[name][1]
    assert spec is not None
    assert sorted(spec.state_migrations) == list(range(1, spec.state_version)), (
        f"{name}: state v{spec.state_version} needs exactly the migrations from v1..v{spec.state_version - 1}"
    )
