"""`chorus topics apply` against the real broker, on a registry made for the test.

Topic names carry a uuid so that the test never meets topics of the registry or of
another test; every topic it creates is deleted afterwards.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from chorus.kernel.kafka import make_admin
from chorus.tools.cli.main import app
from chorus.tools.topics import EX_UNAVAILABLE, ActualTopic, read_topics
from tests.support.processes import ROOT

pytestmark = pytest.mark.integration


class TestRegistry:
    """A registry directory holding only topics/, as `chorus topics` needs."""

    __test__ = False  # not a test class for pytest, despite its name

    def __init__(self, root: Path, unique: str) -> None:
        self.root = root
        (root / "topics").mkdir(parents=True)
        self.plain = f"it.orders.u{unique}"
        self.laned = f"it.work.u{unique}"
        self.specs: dict[str, dict[str, Any]] = {
            self.plain: spec(self.plain, partitions=2, retention_ms=3_600_000),
            self.laned: spec(
                self.laned, partitions=1, retention_ms=86_400_000, lanes=True, cleanup="compact"
            ),
        }
        self.write()

    def physical(self) -> list[str]:
        return [self.plain, f"{self.laned}.high", self.laned, f"{self.laned}.low"]

    def write(self) -> None:
        for name, body in self.specs.items():
            (self.root / "topics" / f"{name}.yaml").write_text(yaml.safe_dump(body))


def spec(
    topic: str, *, partitions: int, retention_ms: int, lanes: bool = False, cleanup: str = "delete"
) -> dict[str, Any]:
    return {
        "topic": topic,
        "description": "A topic made by an integration test.",
        "owner": "it_owner",
        "producers": ["it_producer"],
        "consumers": ["it_consumer"],
        "partitions": partitions,
        "retention_ms": retention_ms,
        "cleanup_policy": cleanup,
        "lanes": lanes,
        "events": [{"type": f"{topic.replace('.', '_')}.happened", "versions": [1]}],
    }


@pytest.fixture
def registry(tmp_path: Path, unique: str, kafka_bootstrap: str) -> Iterator[TestRegistry]:
    reg = TestRegistry(tmp_path / "schemas", unique)
    yield reg
    asyncio.run(delete(kafka_bootstrap, reg.physical()))


def chorus(bootstrap: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"CHORUS_KAFKA_BOOTSTRAP": bootstrap})
    return result.exit_code, result.output


def broker_state(bootstrap: str, names: list[str]) -> dict[str, ActualTopic]:
    async def read() -> dict[str, ActualTopic]:
        admin = make_admin(bootstrap)
        await admin.start()
        try:
            return await read_topics(admin, names)
        finally:
            await admin.close()

    return asyncio.run(read())


async def delete(bootstrap: str, names: list[str]) -> None:
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        doomed = [name for name in names if name in existing]
        if doomed:
            await admin.delete_topics(doomed)
    finally:
        await admin.close()


def test_apply_creates_then_changes_nothing_then_grows_partitions(
    registry: TestRegistry, kafka_bootstrap: str
) -> None:
    where = ["--schemas-dir", str(registry.root)]

    code, out = chorus(kafka_bootstrap, "topics", "apply", *where)

    assert code == 0, out
    for name in registry.physical():
        assert f"{name}: created with" in out
    state = broker_state(kafka_bootstrap, registry.physical())
    assert set(state) == set(registry.physical())
    assert state[registry.plain].partitions == 2
    assert state[registry.plain].configs["retention.ms"] == "3600000"
    assert state[registry.plain].configs["cleanup.policy"] == "delete"
    for lane in registry.physical()[1:]:
        assert state[lane].partitions == 1
        assert state[lane].configs["cleanup.policy"] == "compact"
        assert state[lane].configs["retention.ms"] == "86400000"

    code, out = chorus(kafka_bootstrap, "topics", "apply", *where)

    assert code == 0, out
    assert out.splitlines() == [
        f"nothing changed: the 4 topic(s) of the registry on {kafka_bootstrap} already match it"
    ]

    registry.specs[registry.plain]["partitions"] = 5
    registry.specs[registry.plain]["retention_ms"] = 7_200_000
    registry.write()
    code, out = chorus(kafka_bootstrap, "topics", "apply", *where)

    assert code == 0, out
    assert f"{registry.plain}: partitions 2 -> 5" in out
    assert f"{registry.plain}: retention.ms 3600000 -> 7200000" in out
    state = broker_state(kafka_bootstrap, [registry.plain])
    assert state[registry.plain].partitions == 5
    assert state[registry.plain].configs["retention.ms"] == "7200000"
    # Altering retention.ms left the other config set on the topic in place.
    assert state[registry.plain].dynamic["cleanup.policy"] == "delete"

    code, out = chorus(kafka_bootstrap, "topics", "describe", *where)

    assert code == 0, out
    assert f"all 4 topic(s) on {kafka_bootstrap} match the registry" in out


def test_apply_never_removes_partitions_and_says_so(registry: TestRegistry, kafka_bootstrap: str) -> None:
    where = ["--schemas-dir", str(registry.root)]
    code, out = chorus(kafka_bootstrap, "topics", "apply", *where)
    assert code == 0, out

    registry.specs[registry.plain]["partitions"] = 1
    registry.write()
    code, out = chorus(kafka_bootstrap, "topics", "apply", *where)

    assert code == 0, out
    assert (
        f"{registry.plain}: has 2 partitions, the registry asks for 1;"
        " Kafka cannot remove partitions, so it keeps 2"
    ) in out
    assert "nothing changed" in out
    assert broker_state(kafka_bootstrap, [registry.plain])[registry.plain].partitions == 2

    code, out = chorus(kafka_bootstrap, "topics", "describe", *where)

    assert "partitions 2, 1 wanted" in out
    assert "differ from the registry" in out


def test_dry_run_changes_nothing(registry: TestRegistry, kafka_bootstrap: str) -> None:
    code, out = chorus(kafka_bootstrap, "topics", "apply", "--dry-run", "--schemas-dir", str(registry.root))

    assert code == 0, out
    assert f"{registry.plain}: would be created with 2 partitions" in out
    assert broker_state(kafka_bootstrap, registry.physical()) == {}


def test_more_replicas_than_brokers_is_refused(registry: TestRegistry, kafka_bootstrap: str) -> None:
    code, out = chorus(
        kafka_bootstrap,
        "topics",
        "apply",
        "--replication-factor",
        "99",
        "--schemas-dir",
        str(registry.root),
    )

    assert code == 2
    assert "replication factor 99 needs 99 brokers" in out
    assert broker_state(kafka_bootstrap, registry.physical()) == {}


def test_unreachable_broker_names_the_address_and_the_fix(tmp_path: Path, unique: str) -> None:
    registry = TestRegistry(tmp_path / "schemas", unique)
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"

    for command in ("apply", "describe"):
        code, out = chorus(address, "topics", command, "--schemas-dir", str(registry.root))

        assert code == EX_UNAVAILABLE, out
        assert f"cannot reach Kafka at {address}" in out
        assert "make up" in out


def test_a_deployment_overlay_grows_topics_past_the_registry_and_never_below_it(
    registry: TestRegistry, kafka_bootstrap: str, tmp_path: Path
) -> None:
    where = ["--schemas-dir", str(registry.root)]
    code, out = chorus(kafka_bootstrap, "topics", "apply", *where)
    assert code == 0, out
    overlay = tmp_path / "topics.yaml"
    # The chart's values file is the overlay: its other keys are the chart's, not the tools'.
    overlay.write_text(
        yaml.safe_dump(
            {
                "keda": {"enabled": True},
                "topics": {
                    registry.plain: {"partitions": 8, "retention_ms": 7_200_000},
                    registry.laned: {"partitions": 3},
                },
            }
        )
    )

    code, out = chorus(kafka_bootstrap, "topics", "apply", *where, "--overlay", str(overlay))

    assert code == 0, out
    assert f"{registry.plain}: partitions 2 -> 8" in out
    assert f"{registry.plain}: retention.ms 3600000 -> 7200000" in out
    state = broker_state(kafka_bootstrap, registry.physical())
    assert {name: topic.partitions for name, topic in state.items()} == {
        registry.plain: 8,
        **{lane: 3 for lane in registry.physical()[1:]},
    }
    # The same overlay from the environment (as a deployment sets it): the broker matches it...
    env = {"CHORUS_KAFKA_BOOTSTRAP": kafka_bootstrap, "CHORUS_TOPICS_OVERLAY": str(overlay)}
    described = CliRunner().invoke(app, ["topics", "describe", *where], env=env)
    assert f"all 4 topic(s) on {kafka_bootstrap} match the registry" in described.output, described.output
    # ...and without it, the registry alone says what differs.
    code, out = chorus(kafka_bootstrap, "topics", "describe", *where)
    assert "partitions 8, 2 wanted" in out

    for topics, refusal in (
        (
            {registry.plain: {"partitions": 1}},
            f"topics.{registry.plain}.partitions 1: below the registry's 2",
        ),
        (
            {registry.plain: {"retention_ms": 60_000}},
            f"topics.{registry.plain}.retention_ms 60000: shorter than the registry's 3600000",
        ),
        ({"it.nothing.here": {"partitions": 9}}, "topics.it.nothing.here: not a topic of the registry"),
        ({registry.plain: {"partitions": "many"}}, "partitions"),
    ):
        overlay.write_text(yaml.safe_dump({"topics": topics}))
        code, out = chorus(kafka_bootstrap, "topics", "apply", *where, "--overlay", str(overlay))
        assert code == 2 and refusal in out, out
    assert broker_state(kafka_bootstrap, [registry.plain])[registry.plain].partitions == 8


def test_the_platforms_approvals_grow_to_24_partitions_with_an_overlay(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """On the platform's own registry (a dry run: the stack's topics are shared)."""
    overlay = tmp_path / "topics.yaml"
    overlay.write_text(yaml.safe_dump({"topics": {"approvals.events": {"partitions": 24}}}))

    code, out = chorus(
        kafka_bootstrap,
        "topics",
        "apply",
        "--dry-run",
        "--overlay",
        str(overlay),
        "--schemas-dir",
        str(ROOT / "schemas"),
    )

    assert code == 0, out
    assert "approvals.events: would change partitions 6 -> 24" in out
    # Nothing else: every other topic stays as the registry has it.
    assert "would change 1 of " in out and "0 created, 1 with more partitions, 0 with new configs" in out
