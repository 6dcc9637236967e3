"""Fuzzing the pipeline on real PostgreSQL: whatever a record holds, handling it ends with
its outcome committed (handled, retrying or dead-lettered), never with an exception that
would hold its partition."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from chorus.base.errors import DecodeError
from chorus.contracts.registry import Registry
from chorus.kernel.codec import decode
from chorus.kernel.records import Record
from chorus.runtime.runner import ServiceRunner, ServiceSettings, running
from tests.support.events import TaskSubmitted
from tests.support.hostile import _paths, hostile_numbers, hostile_strings, json_trees, replace_at
from tests.support.kafka import envelope
from tests.support.registry import isolated_registry
from tests.support.testservice import make_spec

pytestmark = pytest.mark.integration

OFFSETS = itertools.count(1_000_000)  # positions no real record of the test topic has


@pytest.fixture(scope="module")
async def service(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[tuple[Registry, ServiceRunner]]:
    unique = uuid.uuid4().hex[:10]
    registry = await isolated_registry(tmp_path_factory.mktemp("fuzz"), unique, kafka_bootstrap)
    settings_ = ServiceSettings(kafka_bootstrap=kafka_bootstrap, database_url=database_url, log_json=False)
    async with running(make_spec(f"svc_{unique}"), settings_, registry=registry) as runner:
        yield registry, runner


tasks = st.builds(
    TaskSubmitted,
    task=hostile_strings(),
    # Every mode a record can pick that stands for input, not for a simulated bug.
    mode=st.sampled_from(["ok", "note", "nul_state", "huge_emit", "steps", "semantic"]),
    note=hostile_strings(),
    transient_failures=st.integers(min_value=0, max_value=1),
)


def as_bytes(body: Any) -> bytes:
    return json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")


@st.composite
def records(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["bytes", "tree", "event", "mutated"]))
    if kind == "bytes":
        return draw(st.binary(max_size=500))
    if kind == "tree":
        return as_bytes(draw(json_trees(max_leaves=15)))
    event = envelope(draw(tasks)).model_dump(mode="json")
    if kind == "event":
        return as_bytes(event)
    path = draw(st.sampled_from([p for p in _paths(event) if p]))
    value = draw(st.one_of(hostile_strings(), hostile_numbers(), json_trees(max_leaves=5)))
    return as_bytes(replace_at(event, path, value))


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=records())
async def test_every_record_ends_committed_whatever_it_holds(
    service: tuple[Registry, ServiceRunner], pg: asyncpg.Connection, raw: bytes
) -> None:
    registry, runner = service
    assert runner.chain is not None
    topic = registry.physical_topic("test.task_submitted")
    offset = next(OFFSETS)
    record = Record(topic, 0, offset, b"fuzz", raw, (("h", b"\x00\xff"),))
    await asyncio.wait_for(runner.chain.run(record), timeout=60)  # raises = the property fails

    schema = runner.store.schema
    try:
        event_id = decode(raw, registry).envelope.event_id
    except DecodeError:
        event_id = uuid.uuid5(uuid.NAMESPACE_URL, f"chorus:{runner.group}:{topic}:0:{offset}")
    outcome = await pg.fetchval(
        f"SELECT outcome FROM {schema}.inbox WHERE consumer_group = $1 AND event_id = $2",
        runner.group,
        event_id,
    )
    assert outcome in {"done", "retrying", "dead_lettered", "review_requested"}, (raw[:200], outcome)
    event(f"outcome: {outcome}")
    assert runner.fatal is None
