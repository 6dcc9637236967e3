"""A project of one's own deployed like the platform: the Helm chart with its services, and an
override of Chorus's docker-compose.yml that adds them.

Both run one image, the project's (the Dockerfile ``chorus new`` writes: Chorus's image plus
the project's code and registry). Every Chorus service runs it too, because every one reads
the union of the registries (the gateway accepts the project's workflows, the audit
projector records its events, the secrets and ACLs include its principals), as the dev stack
runs them with ``CHORUS_SCHEMAS_DIR``.

- :func:`chart_files`: the chart Chorus ships (``deploy/helm/chorus``, inside the package as
  ``chorus/tools/helm``) with its ``files/registry.yaml`` generated from the project's
  registry (:mod:`chorus.tools.chart`): the same probes, security context, NetworkPolicies,
  KEDA scaling and ACLs for the project's services as for the platform's. A project's
  deployment leaves the reference workflows out.
- :func:`compose_override`: the project's services in Chorus's compose stack, each as its
  own principal with its own secrets volume, and every Chorus container on the project's
  image (built on the compose stack's, which has the sandbox the project's dev settings use).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from chorus.contracts.registry import load_registry, read_project
from chorus.tools.chart import ProjectFacts, chart_registry, dump, http_port
from chorus.tools.devstack import project_services

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CHART_NAME = "chorus"
CHART_REGISTRY = Path("files") / "registry.yaml"
SKIPPED = ("ci",)
"""Folders of the shipped chart a project's copy leaves out (this repository's CI values)."""
VALUES = "values.yaml"
SERVICE_ENTRY = re.compile(r"^  ([a-z0-9_]+):\s*$")
"""A service's entry in values.yaml's services (two spaces in, then its name)."""
PROJECT_ENTRY = """\
  {name}:
    enabled: true
    replicas: 1
    pdb: {{enabled: true, maxUnavailable: 1}}
    autoscaling: {{enabled: true, minReplicaCount: 0, maxReplicaCount: 0}}
    env: {{}}
    # What it calls outside (a model, an API): networkPolicy.egress, as the platform's have.
"""
CHORUS_DOCKERFILE = "deploy/docker/Dockerfile"
"""How docker-compose.yml's Chorus containers are told from Kafka's, PostgreSQL's, ...: they
build this."""
TEMPLATE = "x-chorus"
SANDBOX = "sandbox"
SANDBOX_URL = "http://sandbox:9400"
"""The compose stack's sandbox, on its network (the project's dev settings' ``{sandbox}``)."""


@dataclass(frozen=True)
class Project:
    """A project as its deployment sees it: where it is, its name and version (its image's
    default tag), and what its dev settings give its services and the sandbox."""

    root: Path
    facts: ProjectFacts
    services: list[str]
    dev_env: dict[str, str]
    sandbox_plugins: list[str]

    @property
    def image(self) -> str:
        return f"{self.facts.name}:{self.facts.version}"


def load_project(root: Path) -> Project:
    """The project at ``root`` (its ``schemas/project.yaml`` and ``pyproject.toml``); its
    services become importable (the chart reads their settings)."""
    declared = read_project(root / "schemas")
    if declared is None:
        raise ValueError(f"{root}: no schemas/project.yaml (not a project)")
    pyproject = root / "pyproject.toml"
    try:
        version = str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{pyproject}: no [project] version, the image's tag ({exc})") from exc
    services = root / "services"
    if str(services) not in sys.path:
        sys.path.append(str(services))
    return Project(
        root,
        ProjectFacts(declared.name, version),
        project_services(root),
        dict(declared.dev.env),
        list(declared.dev.sandbox),
    )


# -- the Helm chart ---------------------------------------------------------------------------


def shipped_chart() -> Path:
    """The chart inside the installed package (in a checkout, deploy/helm/chorus)."""
    return Path(str(files("chorus.tools") / "helm"))


def chart_files(project: Project) -> dict[str, bytes]:
    """Path inside the chart -> content: the shipped chart, its registry the project's."""
    source = shipped_chart()
    if not (source / "Chart.yaml").is_file():
        raise FileNotFoundError(f"{source}: no Helm chart (this install of Chorus lacks its package data)")
    wanted = {
        path.relative_to(source).as_posix(): path.read_bytes()
        for path in _tree(source)
        if path.relative_to(source).parts[0] not in SKIPPED
    }
    facts = chart_registry(load_registry(project.root / "schemas"), project.facts)
    wanted[CHART_REGISTRY.as_posix()] = dump(facts).encode()
    wanted[VALUES] = project_values(wanted[VALUES].decode(), facts["services"], project.services).encode()
    return wanted


def project_values(text: str, services: Collection[str], own: Collection[str]) -> str:
    """The chart's values.yaml with a ``services`` entry for each service the project's chart
    runs: the platform's as they are, none for the reference workflows', one for each of the
    project's (scaled by KEDA when it is on, like the reference agents; no egress beyond the
    platform's until its networkPolicy says so)."""
    lines = text.splitlines(keepends=True)
    start = lines.index("services:\n") + 1
    end = next(i for i in range(start, len(lines)) if lines[i][:1] not in (" ", "\n"))
    while not lines[end - 1].strip():  # the blank lines before the next section stay there
        end -= 1
    kept: list[str] = []
    name = ""
    for line in lines[start:end]:
        entry = SERVICE_ENTRY.match(line)
        name = entry.group(1) if entry else name
        if name in services:
            kept.append(line)
    for name in own:
        kept.append(PROJECT_ENTRY.format(name=name))
    return "".join([*lines[:start], *kept, *lines[end:]])


def _tree(folder: Path) -> list[Path]:
    """Every file under ``folder``, through the links a checkout's chart has (its alert
    rules and dashboards link to deploy/observability)."""
    return sorted(Path(top) / name for top, _, names in os.walk(folder, followlinks=True) for name in names)


def stale_chart_files(wanted: Mapping[str, bytes], folder: Path) -> list[str]:
    """The files of the chart in ``folder`` that differ from ``wanted`` (or are not in it)."""
    present = {p.relative_to(folder).as_posix(): p.read_bytes() for p in _tree(folder)}
    return sorted(k for k in wanted.keys() | present.keys() if present.get(k) != wanted.get(k))


def write_files(wanted: Mapping[str, bytes], folder: Path, stale: list[str]) -> None:
    for name in stale:
        path = folder / name
        if name in wanted:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(wanted[name])
        else:
            path.unlink()


# -- docker-compose.yml's override ------------------------------------------------------------


class Override(dict[str, Any]):
    """A mapping that replaces the base file's instead of merging into it (Compose's
    ``!override``): a project's build keeps nothing of Chorus's (its target)."""


def _override(dumper: yaml.SafeDumper, data: Override) -> yaml.Node:
    return dumper.represent_mapping("!override", dict(data))


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # every service's build written out: no anchors to read across


_Dumper.add_representer(Override, _override)


def chorus_containers(compose: Mapping[str, Any]) -> list[str]:
    """The compose services that run Chorus's image (they build its Dockerfile)."""
    return [
        name
        for name, service in compose["services"].items()
        if (service.get("build") or {}).get("dockerfile") == CHORUS_DOCKERFILE
    ]


def _health(port: int) -> dict[str, Any]:
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health')"
    return {"test": ["CMD", "python", "-c", probe], "interval": "5s", "timeout": "3s", "retries": 20}


def compose_override(project: Project, compose_file: Path) -> dict[str, Any]:
    """The override of ``compose_file`` (Chorus's docker-compose.yml) that runs the project."""
    compose: dict[str, Any] = yaml.safe_load(compose_file.read_text())
    base = compose["services"]
    chorus = chorus_containers(compose)
    if not {"secrets", "setup", SANDBOX} <= set(chorus):
        raise ValueError(
            f"{compose_file}: not Chorus's compose file (no secrets, setup and sandbox on its image)"
        )
    # What every Chorus service of the file shares (its x-chorus extension): environment,
    # networks, what it waits for, its restart policy.
    runtime = compose.get(TEMPLATE)
    if not isinstance(runtime, dict):
        raise ValueError(f"{compose_file}: no {TEMPLATE} (what every Chorus service shares)")
    # Paths of an override are read from the first file's folder: Chorus's.
    context = os.path.relpath(project.root.resolve(), compose_file.resolve().parent)
    image = {
        "build": Override(
            context=context, args={"CHORUS_IMAGE": base["secrets"].get("image", "chorus-reference:local")}
        ),
        "image": project.image,
    }
    services: dict[str, Any] = {name: dict(image) for name in chorus}
    services["secrets"]["volumes"] = [f"{name}_secrets:/issue/services/{name}" for name in project.services]
    services[SANDBOX]["command"] = [
        *base[SANDBOX]["command"],
        *(f"--plugin={module}" for module in project.sandbox_plugins),
    ]
    for name in project.services:
        port = http_port(name)
        env = {k: v.replace("{sandbox}", SANDBOX_URL) for k, v in project.dev_env.items()}
        services[name] = {
            **image,
            "command": ["python", "-m", name],
            "environment": {
                **runtime["environment"],
                # The sandbox's deterministic model; a real deployment names an OpenAI-compatible one.
                "CHORUS_LLM_BASE_URL": f"{SANDBOX_URL}/v1",
                **env,
            },
            # Its own settings beside the platform's containers' (CHORUS_ENV=demo for a demo).
            "env_file": [{"path": f"deploy/docker/env/{name}.env", "required": False}],
            "volumes": [f"{name}_secrets:/var/lib/chorus/secrets:ro"],
            "depends_on": {**runtime["depends_on"], SANDBOX: {"condition": "service_started"}},
            "networks": runtime["networks"],
            "restart": runtime["restart"],
            "healthcheck": _health(port),
            "ports": [f"127.0.0.1:{port}:{port}"],
        }
    return {
        "services": services,
        "volumes": {f"{name}_secrets": {} for name in project.services},
    }


def render_override(project: Project, compose_file: Path) -> str:
    header = (
        f"# Generated by `chorus deploy compose`: {project.facts.name}'s services in Chorus's compose\n"
        f"# stack, every Chorus container on the project's image. Do not edit: run it again.\n"
        f"#   docker compose -f {compose_file.name} build   (Chorus's image: {project.image} builds on it)\n"
        f"#   docker compose -f {compose_file.name} -f <this file> up\n"
    )
    body = yaml.dump(compose_override(project, compose_file), Dumper=_Dumper, sort_keys=False, width=110)
    return header + body
