"""``chorus produce`` and ``chorus subscribe`` as a user runs them: the console script, real Kafka.

Each test works on its own copy of the registry (topics renamed with a uuid), so a
subscriber reading from the beginning sees only what the test produced.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from chorus.contracts.registry import Registry, load_registry
from chorus.kernel.codec import decode
from chorus.kernel.kafka import make_consumer
from tests.support.kafka import publish, read_topic
from tests.support.registry import isolated_registry, isolated_schemas, unsigned_starts

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EX_DATAERR = 65
EX_UNAVAILABLE = 69

# Canonical JSON (compact, fields in the model's order, every default spelled out), so
# that what the model sends is exactly these bytes: non-ASCII text, floats, nesting.
REPORT_PAYLOAD = (
    '{"topic":"Durable execution — überall ✓ 12 %",'
    '"sources":[{"name":"alpha","url":"http://127.0.0.1:9000/sources/alpha"},'
    '{"name":"Zoë & Co","url":"http://127.0.0.1:9000/sources/zo%C3%AB"}],'
    '"required_sections":["Summary","Findings"],"min_words":80,'
    '"delivery_url":"http://127.0.0.1:9000/deliveries","sources_within_s":90.5,"sources_policy":"degrade"}'
).encode()

INVOICE_PAYLOAD = {
    "invoice_id": "inv-1",
    "vendor_id": "v-1",
    "document_text": "1 x widget, 10.00 EUR",
    "po_number": "po-1",
    "currency": "EUR",
    "total_cents": 1000,
    "requester_ref": "req-1",
}


@pytest.fixture
def registry(tmp_path: Path, kafka_bootstrap: str, unique: str) -> Registry:
    """The registry with its start requests unsigned, as a project's may be: the platform's
    are the gateway's to state, and `chorus produce` publishes unsigned workflow events only."""
    return asyncio.run(isolated_registry(tmp_path, unique, kafka_bootstrap, signed_starts=False))


@pytest.fixture
def cli_env(registry: Registry, kafka_bootstrap: str) -> Iterator[dict[str, str]]:
    yield {"CHORUS_SCHEMAS_DIR": str(registry.root), "CHORUS_KAFKA_BOOTSTRAP": kafka_bootstrap}


def chorus(env: dict[str, str], *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """The console script's module, as its own process (what `.venv/bin/chorus` runs)."""
    return subprocess.run(
        [sys.executable, "-m", "chorus.tools.cli.main", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def published(result: subprocess.CompletedProcess[bytes]) -> tuple[str, str, int, int]:
    """(event id, topic, partition, offset) from produce's output line."""
    assert result.returncode == 0, result.stderr.decode()
    match = re.search(rb"published (\S+) .* to (\S+) partition (\d+) offset (\d+)", result.stdout)
    assert match, result.stdout
    return match[1].decode(), match[2].decode(), int(match[3]), int(match[4])


def end_offsets(bootstrap: str, topic: str) -> int:
    """Records ever written to ``topic`` (sum of its partitions' end offsets)."""

    async def total() -> int:
        consumer = make_consumer(bootstrap, topic, group_id=None)
        await consumer.start()
        try:
            partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
            return sum((await consumer.end_offsets(partitions)).values())
        finally:
            await consumer.stop()

    return asyncio.run(total())


def test_produce_then_subscribe_round_trips_the_payload_byte_for_byte(
    tmp_path: Path, registry: Registry, cli_env: dict[str, str], kafka_bootstrap: str, unique: str
) -> None:
    data = tmp_path / "report.json"
    data.write_bytes(REPORT_PAYLOAD)
    workflow_id = f"wf-cli-{unique}"
    result = chorus(
        cli_env,
        "produce",
        "report.requested",
        "--data",
        f"@{data}",
        "--workflow-id",
        workflow_id,
        "--workflow-type",
        "research",
    )
    event_id, topic, partition, offset = published(result)
    assert topic == registry.physical_topic("report.requested")

    tail = chorus(
        cli_env,
        "subscribe",
        "report.requested",
        "--from-beginning",
        "--json",
        "--filter",
        f"workflow_id={workflow_id}",
        "--max",
        "1",
        "--timeout",
        "60",
    )
    assert tail.returncode == 0, tail.stderr.decode()
    [line] = tail.stdout.splitlines()
    # The payload inside the printed envelope is the file's bytes, unchanged.
    assert line.endswith(b'"payload":' + REPORT_PAYLOAD + b"}")
    envelope = json.loads(line)
    assert envelope["event_id"] == event_id
    assert envelope["workflow_id"] == workflow_id
    assert envelope["workflow_type"] == "research"
    assert envelope["producer"]["service"] == "chorus-cli"
    # ... and the printed line is the record on the topic, byte for byte, where produce said.
    [record] = asyncio.run(read_topic(kafka_bootstrap, [topic], until=lambda rs: len(rs) >= 1))
    assert record.value == line
    assert (record.partition, record.offset, record.key) == (
        partition,
        offset,
        workflow_id.encode(),
    )
    assert dict(record.headers)["event_type"] == b"report.requested"
    assert decode(record.value, registry).payload.model_dump(mode="json") == json.loads(REPORT_PAYLOAD)


def test_an_invalid_payload_names_the_field_and_publishes_nothing(
    registry: Registry, cli_env: dict[str, str], kafka_bootstrap: str
) -> None:
    bad = json.loads(REPORT_PAYLOAD)
    bad["sources_within_s"] = "soon"
    del bad["sources"][1]["url"]
    result = chorus(cli_env, "produce", "report.requested", "--data", "-", stdin=json.dumps(bad).encode())
    assert result.returncode == EX_DATAERR
    err = result.stderr.decode()
    assert "report.requested v1 payload is invalid" in err
    assert '/sources_within_s: Input should be a valid number (expected a number, got "soon")' in err
    assert "/sources/1/url: required field is missing" in err
    assert result.stdout == b""
    assert end_offsets(kafka_bootstrap, registry.physical_topic("report.requested")) == 0


def test_an_unknown_event_type_suggests_the_closest_names(cli_env: dict[str, str]) -> None:
    result = chorus(cli_env, "produce", "approval.requestd", "--data", "{}")
    assert result.returncode == EX_DATAERR
    assert "unknown event type 'approval.requestd'; did you mean approval.requested" in (
        result.stderr.decode()
    )
    unknown_target = chorus(cli_env, "subscribe", "workflow.endd", "--timeout", "1")
    assert unknown_target.returncode == EX_DATAERR
    assert "did you mean workflow.ended" in unknown_target.stderr.decode()


@pytest.mark.parametrize(
    ("event_type", "topic"),
    [("timer.cancel", "chorus.timers"), ("retry.due", "chorus.control"), ("data.removed", "chorus.data")],
)
def test_platform_commands_are_refused_naming_where_to_act_instead(
    cli_env: dict[str, str], event_type: str, topic: str
) -> None:
    """An operator's login may write every topic; a hand-made timer cancel, retry or data
    request would bypass the services that check and record them."""
    result = chorus(cli_env, "produce", event_type, "--data", "{}")
    assert result.returncode == EX_DATAERR
    # The test stack suffixes its topics: chorus.timers.t1234…
    assert f"{event_type} is a platform command ({topic}" in result.stderr.decode()


def test_a_request_that_starts_a_workflow_is_refused_naming_the_gateways_command(
    tmp_path: Path, unique: str
) -> None:
    """The gateway signs the platform's start requests (and records who submitted, the
    deadline and the callback): its services refuse one from anyone else, so the CLI does
    not publish one (no broker is reached: this one is down)."""
    registry = load_registry(isolated_schemas(tmp_path, unique))
    env = {"CHORUS_SCHEMAS_DIR": str(registry.root), "CHORUS_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    for event_type, workflow_type, payload in (
        ("invoice.received", "procurement", json.dumps(INVOICE_PAYLOAD)),
        ("report.requested", "research_report", REPORT_PAYLOAD.decode()),
    ):
        result = chorus(env, "produce", event_type, "--data", payload)
        assert result.returncode == EX_DATAERR
        err = result.stderr.decode()
        assert f"{event_type} starts a {workflow_type} workflow and is signed by gateway" in err
        assert f"`chorus workflows start {workflow_type} --data ...`" in err


def test_dry_run_prints_a_valid_envelope_and_publishes_nothing(
    registry: Registry, cli_env: dict[str, str], kafka_bootstrap: str
) -> None:
    result = chorus(
        cli_env,
        "produce",
        "invoice.received",
        "--data",
        json.dumps({**INVOICE_PAYLOAD, "not_a_field": 1}),
        "--priority",
        "high",
        "--dry-run",
    )
    assert result.returncode == 0, result.stderr.decode()
    envelope = json.loads(result.stdout)
    event = decode(json.dumps(envelope).encode(), registry)
    assert (event.event_type, event.envelope.priority) == ("invoice.received", "high")
    assert envelope["payload"] == INVOICE_PAYLOAD
    err = result.stderr.decode()
    assert "/not_a_field is not a field of invoice.received v2" in err
    assert f"would publish to {registry.physical_topic('invoice.received', 'high')}" in err
    for lane in registry.topic_for("invoice.received").physical_topics():
        assert end_offsets(kafka_bootstrap, lane) == 0


def test_priority_picks_the_lane_and_a_topic_name_subscribes_to_every_lane(
    registry: Registry, cli_env: dict[str, str]
) -> None:
    topics = []
    for lane in ("high", "low"):
        result = chorus(
            cli_env,
            "produce",
            "invoice.received",
            "--data",
            json.dumps(INVOICE_PAYLOAD),
            "--priority",
            lane,
        )
        topics.append(published(result)[1])
    assert topics == [
        registry.physical_topic("invoice.received", "high"),
        registry.physical_topic("invoice.received", "low"),
    ]
    logical = registry.topic_for("invoice.received").topic
    tail = chorus(
        cli_env, "subscribe", logical, "--from-beginning", "--json", "--max", "2", "--timeout", "60"
    )
    assert tail.returncode == 0, tail.stderr.decode()
    assert sorted(json.loads(line)["priority"] for line in tail.stdout.splitlines()) == [
        "high",
        "low",
    ]


def test_subscribe_shows_undecodable_records_and_starts_where_asked(
    registry: Registry, cli_env: dict[str, str], kafka_bootstrap: str, unique: str
) -> None:
    topic = registry.physical_topic("invoice.received")
    key = f"wf-{unique}".encode()
    asyncio.run(publish(kafka_bootstrap, topic, [b"\x00 not an event"], key=key))
    first = chorus(
        cli_env,
        "produce",
        "invoice.received",
        "--data",
        json.dumps(INVOICE_PAYLOAD),
        "--workflow-id",
        key.decode(),
    )
    first_id = published(first)[0]
    time.sleep(1.5)  # record timestamps are milliseconds: leave a clear gap
    between = datetime.now(timezone.utc)
    time.sleep(0.5)
    second_id = published(
        chorus(
            cli_env,
            "produce",
            "invoice.received",
            "--data",
            json.dumps({**INVOICE_PAYLOAD, "invoice_id": "inv-2"}),
            "--workflow-id",
            key.decode(),
        )
    )[0]

    everything = chorus(
        cli_env, "subscribe", topic, "--from-beginning", "--json", "--max", "3", "--timeout", "60"
    )
    assert everything.returncode == 0, everything.stderr.decode()
    poison, one, two = (json.loads(line) for line in everything.stdout.splitlines())
    assert poison["undecodable"] is True
    assert base64.b64decode(poison["value_b64"]) == b"\x00 not an event"
    assert poison["key"] == key.decode() and poison["error"].startswith("NotJSONError")
    assert (one["event_id"], two["event_id"]) == (first_id, second_id)

    readable = chorus(cli_env, "subscribe", topic, "--from-beginning", "--max", "3", "--timeout", "60")
    assert readable.returncode == 0, readable.stderr.decode()
    lines = readable.stdout.decode().splitlines()
    assert lines[0].startswith("undecodable ") and "NotJSONError" in lines[0]
    assert all("invoice.received v2" in line and key.decode() in line for line in lines[1:])

    since = chorus(cli_env, "subscribe", topic, "--since", between.isoformat(), "--json", "--timeout", "8")
    assert since.returncode == 0, since.stderr.decode()
    assert [json.loads(line)["event_id"] for line in since.stdout.splitlines()] == [second_id]

    # A group resumes after what it printed, and only that.
    group = f"cli-test-{uuid.uuid4().hex[:8]}"
    once = chorus(
        cli_env,
        "subscribe",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--json",
        "--max",
        "1",
        "--timeout",
        "60",
    )
    assert [json.loads(line).get("undecodable") for line in once.stdout.splitlines()] == [True]
    rest = chorus(cli_env, "subscribe", topic, "--group", group, "--json", "--timeout", "8")
    assert rest.returncode == 0, rest.stderr.decode()
    assert [json.loads(line)["event_id"] for line in rest.stdout.splitlines()] == [
        first_id,
        second_id,
    ]


def test_no_broker_or_no_topic_says_where_and_what_to_do(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    registry = load_registry(unsigned_starts(isolated_schemas(tmp_path, f"{unique}x")))
    payload = json.dumps(INVOICE_PAYLOAD)
    env = {"CHORUS_SCHEMAS_DIR": str(registry.root), "CHORUS_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    down = chorus(env, "produce", "invoice.received", "--data", payload)
    assert down.returncode == EX_UNAVAILABLE
    assert "cannot reach Kafka at 127.0.0.1:1" in down.stderr.decode()
    assert "make up" in down.stderr.decode()
    also_down = chorus(env, "subscribe", "invoice.received", "--timeout", "1")
    assert also_down.returncode == EX_UNAVAILABLE

    # A broker, but the registry's topics were never created on it.
    env["CHORUS_KAFKA_BOOTSTRAP"] = kafka_bootstrap
    missing = chorus(env, "produce", "invoice.received", "--data", payload)
    assert missing.returncode == EX_UNAVAILABLE
    assert f"topic {registry.physical_topic('invoice.received')} does not exist" in (missing.stderr.decode())
    assert "chorus topics apply" in missing.stderr.decode()


def test_subscribe_reads_to_the_end_then_stops_from_any_offset_with_keys_and_headers(
    registry: Registry, cli_env: dict[str, str], unique: str
) -> None:
    """kcat's -e, -p and -o: what an operator reaches for to look at a partition."""
    payload = json.dumps(INVOICE_PAYLOAD)
    produced = [
        published(
            chorus(
                cli_env,
                "produce",
                "invoice.received",
                "--data",
                payload,
                "--workflow-id",
                f"wf-{n}-{unique}",
            )
        )
        for n in range(4)
    ]
    topic = produced[0][1]
    everything = chorus(
        cli_env, "subscribe", topic, "--from-beginning", "--exit-at-end", "--keys", "--headers"
    )
    assert everything.returncode == 0, everything.stderr.decode()  # it stopped by itself
    out = everything.stdout.decode()
    assert "4 record(s)" in everything.stderr.decode()
    for n in range(4):
        assert f"key='wf-{n}-{unique}'" in out
    assert out.count('"event_type": "invoice.received"') == 4  # the headers every producer sets

    # One partition, from its last record (offset -1), as JSON: exactly that record.
    _, _, partition, offset = produced[-1]
    last = chorus(cli_env, "subscribe", topic, "-p", str(partition), "-o", "-1", "-e", "--json")
    assert last.returncode == 0, last.stderr.decode()
    [line] = last.stdout.decode().splitlines()
    assert json.loads(line)["workflow_id"] == f"wf-3-{unique}"
    at = chorus(cli_env, "subscribe", topic, "-p", str(partition), "-o", str(offset), "-e", "--json")
    assert [json.loads(x)["workflow_id"] for x in at.stdout.decode().splitlines()] == [f"wf-3-{unique}"]
    # Nothing new since the start: -e without a start reads nothing and stops at once.
    assert "0 record(s)" in chorus(cli_env, "subscribe", topic, "-e").stderr.decode()

    wrong = chorus(cli_env, "subscribe", topic, "-p", "99", "-e")
    assert wrong.returncode == EX_DATAERR and "no partition 99" in wrong.stderr.decode()
    grouped = chorus(cli_env, "subscribe", topic, "--group", f"g-{unique}", "-e")
    assert grouped.returncode == 2 and "without --group" in grouped.stderr.decode()


def test_version_says_which_chorus() -> None:
    result = chorus({}, "--version")
    assert result.returncode == 0 and re.fullmatch(rb"chorus \d+\.\d+\.\d+\S*\n", result.stdout)
