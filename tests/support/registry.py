"""An isolated copy of the registry per test: every topic renamed with a unique suffix.

Tests then share the broker but never each other's topics, so a consumer that
starts from the earliest offset sees only its own test's events.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import yaml

from chorus.contracts.registry import Registry, load_registry
from chorus.kernel.kafka import kafka_auth, make_admin
from chorus.privacy.signing import make_keys
from chorus.testing import stack as teststack
from chorus.tools.access import Access, Plan, grants, local_passwords, principals
from tests.support.events import TEST_TOPIC_YAML

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


# Topics this test process created; conftest deletes them when the session ends, so
# the shared local broker does not accumulate thousands of partitions (each one
# holds open files: the broker died of "Too many open files" before this).
CREATED_TOPICS: list[str] = []


def isolated_schemas(
    tmp: Path,
    suffix: str,
    *,
    with_test_topic: bool = True,
    partitions: int | None = 1,
    root: Path = SCHEMAS,
    test_consumers: Sequence[str] = (),
) -> Path:
    """A copy of the registry with unique topic names; ``partitions`` overrides every topic's
    partition count (1 keeps the broker light; None keeps the registry's counts); ``root``
    another registry (a project's: the copy is its union with the platform's);
    ``test_consumers`` the names test services read the test topic under, beside
    ``test_service`` (what the registry says a service reads decides where its dead
    letters may be redriven)."""
    test_topic = TEST_TOPIC_YAML.replace(
        "consumers: [test_service]", f"consumers: [{', '.join(['test_service', *test_consumers])}]"
    )
    extra = [test_topic] if with_test_topic else []
    return teststack.isolated_schemas(tmp, suffix, root=root, partitions=partitions, add_topics=extra)


async def provision(registry: Registry, bootstrap: str) -> None:
    """The registry's topics. In-process tests use them as the admin; a test that runs
    services as their own principals (DevStack) grants them access too (grant_access)."""
    CREATED_TOPICS.extend(await teststack.provision(registry, bootstrap))


async def grant_access(registry: Registry, bootstrap: str) -> None:
    """The registry's ACLs, added to what the broker has (never revoking: services run as
    the same principals against every registry of this broker)."""
    access = Access(bootstrap, kafka_auth())
    await asyncio.to_thread(access.apply, Plan(add=grants(registry), revoke=[], foreign=0))


async def ensure_service_users(bootstrap: str, schemas: Path = SCHEMAS) -> None:
    """Every principal of the registry exists with the password its file holds (what
    `make up` does with `chorus access apply --users-dir`), for DevStack's services."""
    users_dir = Path(os.environ["CHORUS_KAFKA_USERS_DIR"])
    access = Access(bootstrap, kafka_auth())
    passwords = local_passwords(users_dir, principals(load_registry(schemas)))
    await asyncio.to_thread(access.upsert_users, passwords)


async def delete_created_topics(bootstrap: str) -> None:
    if not CREATED_TOPICS:
        return
    admin = make_admin(bootstrap, client_id="chorus-tests-cleanup")
    await admin.start()
    try:
        for start in range(0, len(CREATED_TOPICS), 100):
            await admin.delete_topics(CREATED_TOPICS[start : start + 100])
    finally:
        await admin.close()
    await asyncio.to_thread(Access(bootstrap, kafka_auth()).revoke_topics, CREATED_TOPICS)
    CREATED_TOPICS.clear()


def unsigned_starts(schemas: Path) -> Path:
    """``schemas`` (a test's copy) with the requests that start its workflows unsigned, as a
    project may leave its own: the platform's are the gateway's to sign, so `chorus produce`
    refuses them."""
    declared = yaml.safe_load((schemas / "workflows.yaml").read_text()) or {}
    starts = {workflow["start"] for workflow in declared.values()}
    for path in (schemas / "topics").glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        for event in data["events"]:
            if event["type"] in starts:
                event.pop("signed_by", None)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return schemas


async def isolated_registry(
    tmp: Path,
    suffix: str,
    bootstrap: str,
    *,
    partitions: int | None = 1,
    root: Path = SCHEMAS,
    test_consumers: Sequence[str] = (),
    signed_starts: bool = True,
) -> Registry:
    schemas = isolated_schemas(tmp, suffix, partitions=partitions, root=root, test_consumers=test_consumers)
    if not signed_starts:
        unsigned_starts(schemas)
    registry = load_registry(schemas)
    await provision(registry, bootstrap)
    return registry


@asynccontextmanager
async def as_the_projector(
    tmp_path: Path, unique: str, bootstrap: str
) -> AsyncIterator[tuple[Registry, str]]:
    """A test's registry and the name its audit projector runs under (``audit_<unique>``, so
    that no two tests share a projection). Erasures, retirements, attention alerts and an
    erased workflow's end are the projector's to state (signed_by), so that name takes
    audit_projector's place on chorus.data and workflows.lifecycle and gets a signing key of
    its own, deleted after."""
    name = f"audit_{unique}"
    root = isolated_schemas(tmp_path, unique)
    for topic in ("chorus.data", "workflows.lifecycle"):
        path = root / "topics" / f"{topic}.t{unique}.yaml"
        path.write_text(path.read_text().replace("audit_projector", name))
    registry = load_registry(root)
    await provision(registry, bootstrap)
    keys = Path(os.environ["CHORUS_SIGNING_DIR"])
    made = make_keys(keys, [name])
    try:
        yield registry, name
    finally:
        for made_name in made:
            for suffix in (".key", ".pub"):
                (keys / f"{made_name}{suffix}").unlink(missing_ok=True)
