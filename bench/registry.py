"""A per-run copy of the registry plus the bench topics, every topic renamed ``<topic>.t<suffix>``.

Reuses the test suite's isolation (tests.support.registry) so that a run shares
the broker with concurrent test suites but none of their topics.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from bench.events import BENCH_TOPICS
from chorus.contracts.base import CATALOG
from chorus.contracts.registry import Registry, event_schema, load_registry
from chorus.kernel.kafka import make_admin
from chorus.testing.stack import ensure_topics
from tests.support.registry import isolated_schemas, provision

PARTITIONS = 6


async def bench_registry(tmp: Path, suffix: str, bootstrap: str) -> Registry:
    root = isolated_schemas(tmp, suffix, with_test_topic=False)
    for text in BENCH_TOPICS.values():
        data = yaml.safe_load(text)
        data["topic"] = f"{data['topic']}.t{suffix}"
        (root / "topics" / f"{data['topic']}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    # The bench event types' schemas, as `chorus schemas generate` writes the contracts': the
    # runtime finds which fields to seal there (chorus.privacy.crypto), not in the models.
    for event_type, version in [k for k, m in CATALOG.items() if m.__module__ == "bench.events"]:
        path = root / "events" / f"{event_type}.v{version}.schema.json"
        path.write_text(json.dumps(event_schema(event_type, version), indent=2) + "\n")
    registry = load_registry(root)
    await provision(registry, bootstrap)
    return registry


async def raw_topics(bootstrap: str, suffix: str, names: list[str]) -> dict[str, str]:
    """Plain topics for the raw aiokafka baselines (not in any registry)."""
    physical = {name: f"{name}.t{suffix}" for name in names}
    await ensure_topics(bootstrap, [(t, PARTITIONS) for t in physical.values()])
    return physical


async def delete_topics(bootstrap: str, suffix: str) -> int:
    """Delete every topic of this run (they are only useful while it runs)."""
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if t.endswith(f".t{suffix}")]
        if mine:
            await admin.delete_topics(mine)
        return len(mine)
    finally:
        await admin.close()
