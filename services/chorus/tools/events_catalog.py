"""Everything about one event type in one place: its topic, versions, schema and example
files, who produces it (and how), who signs it, who consumes it, and the tests that name it
(``chorus events show``, ``docs/events.md``).

Sources, in this order of trust:

- the registry (topics, versions, schemas, examples, signers, principals, workflows.yaml);
- each service's declaration (``chorus.tools.declarations``): ``ServiceSpec.produces`` says
  which types a service puts out, its handlers which it consumes and at which version;
- its source (``chorus.tools.codescan``): which of those it only schedules as a timer
  target, so the timer service publishes them when due; the runtime's own source says what
  every runtime service emits or schedules (retries) on its behalf;
- a text scan of the tests (``chorus.tools.eventtests``).

Where a service's code cannot be read, its topic's producers in the registry stand
(``Route.LISTED``): nothing the registry says is ever dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from chorus.contracts.base import CATALOG
from chorus.contracts.registry import Registry, platform_schemas_dir
from chorus.tools.declarations import Declarations, read_declarations
from chorus.tools.eventroutes import Consumer, Producer, Routes
from chorus.tools.eventtests import folders_of_tests, project_root, repository_root, tests_naming


@dataclass(frozen=True)
class Version:
    version: int
    model: str | None
    schema: str
    examples: list[str]


@dataclass(frozen=True)
class TopicInfo:
    name: str
    physical: list[str]
    lanes: bool
    partitions: int
    retention_ms: int
    cleanup_policy: str
    message_key: str
    owner: str
    readers: list[str]
    """Every service reading the topic (the registry's consumers and principals' reads)."""


_AS_DECLARED = {"lanes", "partitions", "retention_ms", "cleanup_policy", "message_key", "owner"}
"""TopicInfo's fields that are the topic file's own, under the same names."""


@dataclass(frozen=True)
class EventInfo:
    event_type: str
    summary: str
    topic: TopicInfo
    compatibility: str
    versions: list[Version]
    producers: list[Producer]
    signed_by: list[str]
    """Who states it, each signing its own (empty: not signed)."""
    consumers: list[Consumer]
    tests: list[str]
    notes: list[str] = field(default_factory=list)
    """What could not be read (a service's code), so the answer rests on the registry there."""


class Catalog:
    """The answers for every event type of ``registry`` (read once, then cheap per type)."""

    def __init__(self, registry: Registry, declarations: Declarations | None = None) -> None:
        self.registry = registry
        self.declarations = declarations or read_declarations(registry)
        self.paths = PathStyle([p for p in (repository_root(), project_root(registry)) if p])
        self.routes = Routes(registry, self.declarations, self.paths.show)

    def event_types(self) -> list[str]:
        return self.registry.event_types()

    def describe(self, event_type: str) -> EventInfo:
        """Everything about ``event_type`` (KeyError when the registry does not know it)."""
        registry = self.registry
        topic = registry.topic_for(event_type)
        missing = self.declarations.missing
        return EventInfo(
            event_type=event_type,
            summary=self._summary(event_type),
            topic=self._topic(event_type),
            compatibility=registry.compatibility(event_type),
            versions=[self._version(event_type, v) for v in sorted(registry.versions(event_type))],
            producers=self.routes.producers(event_type),
            signed_by=sorted(registry.signers_of(event_type)),
            consumers=self.routes.consumers(event_type),
            tests=[self.paths.show(p) for p in self._tests[event_type]],
            notes=[missing[n] for n in sorted(missing) if n in {*topic.producers, *topic.consumers}],
        )

    def model_names(self, event_type: str) -> list[str]:
        """The class names of the event's models, one per version the catalog holds."""
        models = (CATALOG.get((event_type, v)) for v in self.registry.versions(event_type))
        return [m.__name__ for m in models if m is not None]

    @cached_property
    def _tests(self) -> dict[str, list[Path]]:
        names = {t: self.model_names(t) for t in self.event_types()}
        return tests_naming(folders_of_tests(self.registry), names)

    def _summary(self, event_type: str) -> str:
        schema = self.registry.schemas.get((event_type, self.registry.latest_version(event_type)), {})
        return str(schema.get("description", "")).strip().split("\n\n", 1)[0].replace("\n", " ")

    def _topic(self, event_type: str) -> TopicInfo:
        spec = self.registry.topic_for(event_type)
        reads = [n for n, p in self.registry.principals.services.items() if spec.topic in p.reads]
        return TopicInfo(
            name=spec.topic,
            physical=spec.physical_topics(),
            readers=sorted({*spec.consumers, *reads}),
            **spec.model_dump(include=_AS_DECLARED),
        )

    def _version(self, event_type: str, version: int) -> Version:
        model = CATALOG.get((event_type, version))
        name = f"{event_type}.v{version}.schema.json"
        roots = (self.registry.root, platform_schemas_dir())
        schema = next((r / "events" / name for r in roots if (r / "events" / name).is_file()), None)
        return Version(
            version=version,
            model=f"{model.__module__}.{model.__qualname__}" if model else None,
            schema=self.paths.show(schema) if schema else f"(missing: events/{name})",
            examples=[self.paths.show(e.path) for e in self.registry.examples.get((event_type, version), [])],
        )


class PathStyle:
    """Paths as a reader finds them: relative to the checkout (or the project), else whole."""

    def __init__(self, bases: list[Path]) -> None:
        self.bases = bases

    def show(self, path: Path) -> str:
        path = path.resolve()
        for base in self.bases:
            if path.is_relative_to(base):
                return path.relative_to(base).as_posix()
        return path.as_posix()


DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def retention_text(ms: int) -> str:
    """``retention_ms`` for people: forever, days or hours (else milliseconds)."""
    if ms < 0:
        return "forever"
    for unit, size in (("day", DAY_MS), ("hour", HOUR_MS)):
        if ms >= size and ms % size == 0:
            count = ms // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{ms} ms"


def topic_lines(topic: TopicInfo) -> list[str]:
    """The topic in two lines: its physical names, then its settings."""
    lanes = f" (priority lanes: {', '.join(topic.physical)})" if topic.lanes else ""
    settings = (
        f"{topic.partitions} partitions, retention {retention_text(topic.retention_ms)}"
        f" ({topic.cleanup_policy}), key {topic.message_key}, owner {topic.owner}"
    )
    return [topic.name + lanes, settings]
