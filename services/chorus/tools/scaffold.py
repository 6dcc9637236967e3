"""``chorus new``: a project of one's own beside the platform, its services and its events.

A project is a folder holding ``schemas/`` (its registry: ``project.yaml``, its topics, event
schemas and examples; it extends the platform's registry), ``services/`` (its services, and
the package of its event models) and ``tests/``. ``chorus new service NAME`` makes the
project first when the folder has none. Nothing of a project is ever added to Chorus's own
packages or registry.

What is generated follows the skeleton of every Chorus service (config, domain, handlers,
adapters, bootstrap, service spec, ``__main__``, README) with a handler test on the testing
kit and an integration test on real Kafka and PostgreSQL, both passing as generated.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from jinja2 import Environment, PackageLoader, StrictUndefined
from pydantic import BaseModel, ValidationError

from chorus import DISTRIBUTION, __version__
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.registry import (
    PROJECT_FILE,
    contract_catalog,
    load_registry,
    platform_schemas_dir,
    read_project,
    write_generated,
)
from chorus.kernel.envelopes import start_envelope
from chorus.tools.declarations import service_module

NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
EVENT_TYPE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
FIELD_KINDS = {"text": "Text", "name": "Name", "count": "Count", "flag": "bool"}
"""What ``--field NAME:KIND`` may say, and the bounded type each kind becomes."""
FIRST_PORT = 8300
"""The first of the ports new services get (the platform's own are 8100-8199)."""
EXAMPLE_VALUES: dict[Any, Any] = {str: "example", int: 1, bool: True, float: 1.5}

_templates = Environment(
    loader=PackageLoader("chorus.tools", "templates"),
    keep_trailing_newline=True,
    undefined=StrictUndefined,
    autoescape=False,  # Python, YAML and Markdown, never HTML
)


class ScaffoldError(ValueError):
    """What was asked cannot be made; the message says why and what to do instead."""


@dataclass(frozen=True)
class Field:
    name: str
    kind: str

    @property
    def annotation(self) -> str:
        return FIELD_KINDS[self.kind]

    @classmethod
    def parse(cls, spec: str) -> Field:
        """``NAME:KIND`` (KIND one of FIELD_KINDS; ``text`` when left out)."""
        name, _, kind = spec.partition(":")
        kind = kind or "text"
        if not NAME.match(name) or name in {"event_type", "version"}:
            raise ScaffoldError(f"field {name!r}: a lowercase name (not event_type or version)")
        if kind not in FIELD_KINDS:
            raise ScaffoldError(f"field {name}: kind {kind!r} is not one of {', '.join(FIELD_KINDS)}")
        return cls(name, kind)


@dataclass(frozen=True)
class Project:
    root: Path
    name: str
    contracts: str

    @property
    def schemas(self) -> Path:
        return self.root / "schemas"

    @property
    def services(self) -> Path:
        return self.root / "services"

    @property
    def events_module(self) -> Path:
        return self.services / self.contracts / "events.py"


def find_project(start: Path) -> Project | None:
    """The project ``start`` is in: the nearest folder up with ``schemas/project.yaml``."""
    for folder in (start, *start.parents):
        found = read_project(folder / "schemas")
        if found is not None:
            return Project(folder, found.name, found.contracts[0] if found.contracts else "")
    return None


def project_name(folder: Path) -> str:
    """A project name from a folder's: lowercase, underscores for anything else."""
    name = re.sub(r"[^a-z0-9]+", "_", folder.resolve().name.lower()).strip("_")
    return name if name[:1].isalpha() else f"p_{name}"


def _free_module(name: str, what: str) -> None:
    """Refuse a package name that something installed has already (a project's package
    would shadow it, or it the project's)."""
    if importlib.util.find_spec(name) is not None:
        raise ScaffoldError(f"{what} {name!r}: a module of that name is installed already; choose another")


def _write(path: Path, text: str, written: list[Path], *, keep: bool = False) -> None:
    if path.exists():
        if keep:
            return
        raise ScaffoldError(f"{path} exists already; nothing was changed")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    written.append(path)


def init_project(root: Path, name: str | None = None) -> tuple[Project, list[Path]]:
    """The project in ``root``, made if there is none (an existing pyproject.toml, conftest
    or .gitignore is kept as it is)."""
    existing = find_project(root)
    if existing is not None:
        return existing, []
    name = name or project_name(root)
    if not NAME.match(name):
        raise ScaffoldError(f"project name {name!r}: lowercase letters, digits and _ (use --project)")
    contracts = f"{name}_contracts"
    _free_module(contracts, "the project's event models package")
    chorus_version = __version__
    values = {
        "project": name,
        "distribution": DISTRIBUTION,
        "contracts": contracts,
        "chorus_version": chorus_version,
        "major": int(chorus_version.split(".")[0]),
    }
    written: list[Path] = []
    for template, target, keep in (
        ("project/pyproject.toml.j2", root / "pyproject.toml", True),
        ("project/gitignore.j2", root / ".gitignore", True),
        ("project/Dockerfile.j2", root / "Dockerfile", True),
        ("project/dockerignore.j2", root / ".dockerignore", True),
        ("project/conftest.py.j2", root / "tests" / "conftest.py", True),
        ("project/project.yaml.j2", root / "schemas" / PROJECT_FILE, False),
        ("project/principals.yaml.j2", root / "schemas" / "principals.yaml", False),
        ("project/contracts_init.py.j2", root / "services" / contracts / "__init__.py", False),
        ("project/events.py.j2", root / "services" / contracts / "events.py", False),
    ):
        _write(target, _templates.get_template(template).render(values), written, keep=keep)
    (root / "schemas" / "topics").mkdir(exist_ok=True)
    return Project(root, name, contracts), written


def class_name(event_type: str) -> str:
    """``ticket.received`` -> ``TicketReceived``."""
    return "".join(part.capitalize() for part in re.split(r"[._]", event_type))


def _known_types(project: Project) -> set[str]:
    types: set[str] = set()
    for folder in (platform_schemas_dir() / "topics", project.schemas / "topics"):
        for path in folder.glob("*.yaml"):
            types.update(e["type"] for e in (yaml.safe_load(path.read_text()) or {}).get("events", []))
    return types


def add_event(
    project: Project,
    event_type: str,
    fields: list[Field],
    *,
    topic: str | None = None,
    doc: str = "",
    producer: str | None = None,
    consumer: str | None = None,
) -> list[Path]:
    """The model of ``event_type`` v1 in the project's events module, the event on its topic
    (made if new). Its schema and example come with :func:`finish`."""
    if not EVENT_TYPE.match(event_type):
        raise ScaffoldError(f"event type {event_type!r}: lowercase and dotted, e.g. ticket.received")
    if event_type in _known_types(project):
        raise ScaffoldError(f"event type {event_type} exists already (the project's or the platform's)")
    topic = topic or f"{project.name}.{event_type.split('.', maxsplit=1)[0]}"
    if not EVENT_TYPE.match(topic):
        raise ScaffoldError(f"topic {topic!r}: lowercase and dotted, e.g. {project.name}.tickets")
    written: list[Path] = []
    model = _templates.get_template("event/model.py.j2").render(
        event_type=event_type,
        cls=class_name(event_type),
        doc=doc or f"{event_type} (describe the fact here).",
        fields=fields or [Field("text", "text")],
    )
    with project.events_module.open("a") as out:
        out.write(model)
    _import_bases(project.events_module, {f.annotation for f in fields or [Field("text", "text")]})
    written.append(project.events_module)
    path = project.schemas / "topics" / f"{topic}.yaml"
    if not path.exists():
        path.write_text(
            _templates.get_template("event/topic.yaml.j2").render(topic=topic, project=project.name)
        )
    spec = yaml.safe_load(path.read_text())
    spec["events"].append({"type": event_type, "versions": [1]})
    for role, service in (("producers", producer), ("consumers", consumer)):
        if service and service not in spec[role]:
            spec[role].append(service)
    _rewrite_yaml(path, spec)
    written.append(path)
    written += _platform_writes(project, topic)
    return written


PLATFORM_WRITERS = ("deadletter_service", "timer_service")
"""Platform services that publish onto a project's topics: a redrive, a due timer."""


def _rewrite_yaml(path: Path, data: Any) -> None:
    """``data`` into ``path``, keeping the comment block the file starts with."""
    header = []
    if path.exists():
        for line in path.read_text().splitlines(keepends=True):
            if not line.startswith("#"):
                break
            header.append(line)
    path.write_text("".join(header) + yaml.safe_dump(data, sort_keys=False))


def _platform_writes(project: Project, topic: str) -> list[Path]:
    path = project.schemas / "principals.yaml"
    principals = yaml.safe_load(path.read_text()) or {}
    platform = principals.get("platform") or {}
    changed = False
    for writer in PLATFORM_WRITERS:
        writes = platform.setdefault(writer, {"writes": []})["writes"]
        if topic not in writes:
            writes.append(topic)
            changed = True
    if not changed:
        return []
    principals["platform"] = platform
    _rewrite_yaml(path, principals)
    return [path]


BASE_IMPORT = re.compile(r"^from chorus.contracts\.base import (.+)$", re.MULTILINE)


def _import_bases(module: Path, names: set[str]) -> None:
    """The bounded field types a new model uses, added to the module's import of them."""
    wanted = {n for n in names if n in FIELD_KINDS.values() and n != "bool"}
    text = module.read_text()
    found = BASE_IMPORT.search(text)
    have = {n.strip() for n in found.group(1).split(",")} if found else {"EventModel", "event"}
    if found and wanted <= have:
        return
    # Classes before functions, as isort orders them.
    line = "from chorus.contracts.base import " + ", ".join(
        sorted(have | wanted, key=lambda n: (n[:1].islower(), n))
    )
    if found:
        text = text.replace(found.group(0), line, 1)
    else:
        text = text.replace(
            "from __future__ import annotations\n", f"from __future__ import annotations\n\n{line}\n", 1
        )
    module.write_text(text)


def next_port(project: Project) -> int:
    taken = {
        int(m.group(1))
        for config in project.services.glob("*/config.py")
        if (m := re.search(r"http_port: int = (\d+)", config.read_text()))
    }
    return max(taken, default=FIRST_PORT - 1) + 1


def add_service(
    project: Project,
    name: str,
    *,
    input_type: str | None = None,
    output_type: str | None = None,
    topic: str | None = None,
) -> list[Path]:
    """Service ``name``: its skeleton and tests, its two events (``input_type`` in, default
    ``<name>.requested``; ``output_type`` out, default ``<name>.completed``), new ones, on
    ``topic`` (default ``<project>.<name>``), its principal."""
    if not NAME.match(name):
        raise ScaffoldError(f"service name {name!r}: lowercase letters, digits and _, e.g. triage_agent")
    if (project.services / name).exists():
        raise ScaffoldError(f"{project.services / name} exists already; nothing was changed")
    if service_module(name) != name:  # a principal, topic group and table name of its own
        raise ScaffoldError(
            f"service {name!r}: Chorus has a service of that name ({service_module(name)}); choose another"
        )
    _free_module(name, "service")
    topic = topic or f"{project.name}.{name}"
    requested, completed = input_type or f"{name}.requested", output_type or f"{name}.completed"
    if requested == completed:
        raise ScaffoldError(f"the service's input and output are both {requested}: name two events")
    written: list[Path] = []
    for event_type, doc in (
        (requested, f"What {name} is asked (describe the fact here)."),
        (completed, f"What {name} answered (describe the fact here)."),
    ):
        written += add_event(
            project, event_type, [Field("text", "text")], topic=topic, doc=doc, producer=None, consumer=None
        )
    spec_path = project.schemas / "topics" / f"{topic}.yaml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["producers"] = sorted({*spec["producers"], name})
    spec["consumers"] = sorted({*spec["consumers"], name})
    _rewrite_yaml(spec_path, spec)
    principals_path = project.schemas / "principals.yaml"
    principals = yaml.safe_load(principals_path.read_text()) or {}
    principals.setdefault("services", {})[name] = {"kind": "runtime"}
    _rewrite_yaml(principals_path, principals)
    written.append(principals_path)
    values = {
        "name": name,
        "cls": class_name(name),
        "contracts": project.contracts,
        "topic": topic,
        "input": requested,
        "output": completed,
        "input_cls": class_name(requested),
        "output_cls": class_name(completed),
        "input_fn": requested.replace(".", "_"),
        "event_imports": ", ".join(sorted([class_name(requested), class_name(completed)])),
        "port": next_port(project),
    }
    service_dir = project.services / name
    for template in sorted(_templates.list_templates(filter_func=lambda t: t.startswith("service/"))):
        rel = template.removeprefix("service/").removesuffix(".j2")
        if rel.startswith("test_"):
            target = project.root / "tests" / f"test_{name}_{rel.removeprefix('test_')}"
        else:
            target = service_dir / rel
        _write(target, _templates.get_template(template).render(values), written)
    return written


def finish(project: Project) -> list[str]:
    """The generated part of the project's registry, in a process of its own (the one that
    wrote the models has not imported them, or imported an older version): the events'
    JSON Schemas, and an example of each new event version."""
    done = subprocess.run(
        [sys.executable, "-m", "chorus.tools.scaffold", str(project.schemas)],
        capture_output=True,
        text=True,
        check=False,
        cwd=project.root,
    )
    if done.returncode != 0:
        raise ScaffoldError(f"generating the schemas failed:\n{done.stderr.strip()}")
    return done.stdout.split()


def _generate(schemas: Path) -> list[str]:
    changed = write_generated(schemas)
    changed += write_examples(schemas)
    load_registry(schemas)  # what was written reads back as a registry
    return changed


EXAMPLE_KEY = "example-{event_type}-1"
"""The idempotency key of the examples ``chorus new`` writes: the ones it may rewrite."""


def write_examples(schemas: Path) -> list[str]:
    """An example envelope of each event version of the project's that has none, and a new
    one for each example written here before that its model no longer accepts (its fields
    changed since ``chorus new event``). Examples written by hand are left alone."""
    project = read_project(schemas)
    if project is None:
        return []
    changed: list[str] = []
    for (event_type, version), model in sorted(contract_catalog(project.contracts).items()):
        path = schemas / "examples" / event_type / str(version) / "example-1.json"
        if path.parent.is_dir() and not _stale_example(path, event_type, model):
            continue
        example_id = uuid.uuid5(uuid.NAMESPACE_URL, f"chorus-example:{event_type}:{version}")
        envelope = start_envelope(
            model.model_validate(_sample(model)),
            workflow_id=f"wf-{project.name}-0001",
            workflow_type=project.name,
            producer=ProducerRef(service=project.name, version="0.1.0"),
            now=datetime(2026, 1, 15, 9, 30, tzinfo=timezone.utc),
            idempotency_key=EXAMPLE_KEY.format(event_type=event_type),
            event_id=example_id,
            traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(envelope.model_dump(mode="json"), indent=2) + "\n")
        changed.append(f"examples/{event_type}/{version}/example-1.json")
    return changed


def _stale_example(path: Path, event_type: str, model: type[BaseModel]) -> bool:
    if not path.is_file():
        return False  # a folder of examples with other names: written by hand
    example = json.loads(path.read_text())
    if example.get("idempotency_key") != EXAMPLE_KEY.format(event_type=event_type):
        return False
    try:
        model.model_validate(example.get("payload"))
    except ValidationError:
        return True
    return False


def _sample(model: type[BaseModel]) -> dict[str, Any]:
    """A payload ``model`` accepts: each field's default, else a value of its type (the first
    of a Literal's)."""
    sample: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if not info.is_required():
            continue
        options = get_args(info.annotation) if get_origin(info.annotation) is Literal else ()
        sample[name] = options[0] if options else EXAMPLE_VALUES.get(info.annotation, "example")
    return sample


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="write a project's generated schemas and examples")
    parser.add_argument("schemas", type=Path)
    for rel in _generate(parser.parse_args().schemas):
        print(rel)
