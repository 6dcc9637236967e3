"""An isolated copy of the registry per test: every topic renamed with a unique suffix.

Tests then share the broker but never each other's topics, so a consumer that
starts from the earliest offset sees only its own test's events.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from chorus.kafka import ensure_topics
from chorus.registry import Registry, load_registry
from tests.support.events import TEST_TOPIC_YAML

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def isolated_schemas(tmp: Path, suffix: str, *, with_test_topic: bool = True) -> Path:
    root = tmp / f"schemas-{suffix}"
    shutil.copytree(SCHEMAS, root)
    topics = root / "topics"
    if with_test_topic:
        (topics / "test.tasks.yaml").write_text(TEST_TOPIC_YAML)
    for path in list(topics.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        data["topic"] = f"{data['topic']}.t{suffix}"
        path.unlink()
        (topics / f"{data['topic']}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


async def provision(registry: Registry, bootstrap: str) -> None:
    wanted = [
        (physical, spec.partitions)
        for spec in registry.topics.values()
        for physical in spec.physical_topics()
    ]
    await ensure_topics(bootstrap, wanted)


async def isolated_registry(tmp: Path, suffix: str, bootstrap: str) -> Registry:
    registry = load_registry(isolated_schemas(tmp, suffix))
    await provision(registry, bootstrap)
    return registry
