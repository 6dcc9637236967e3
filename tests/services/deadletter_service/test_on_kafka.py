"""The dead-letter service as its own process, against real Kafka and PostgreSQL.

End to end: a service (its own process) dead-letters a poison event; the letter is
listed with its original bytes; after the service is fixed and restarted, a
redrive through the CLI gets the event processed; a second redrive publishes
nothing. A discard releases the workflow parked behind the dead letter.

The rest feeds the service synthetic ``event.dead_lettered`` records (the test
plays the runtime) to check filters, grouping, bulk redrive, errors and metrics.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from chorus.contracts.envelope import Envelope
from chorus.contracts.platform import (
    ErrorCategory,
    ErrorDetail,
    EventDeadLettered,
    Failure,
    FireTarget,
    KafkaHeader,
    OriginalRecord,
    RedriveRequested,
    TimerSchedule,
)
from chorus.contracts.registry import Registry
from chorus.kernel.codec import encode
from chorus.tools.cli.main import app as cli
from chorus.tools.devstack import free_port
from chorus.web.apikeys import bearer
from tests.support.events import TaskSubmitted
from tests.support.kafka import approval, envelope, events_of, local_signer, publish, read_topic
from tests.support.processes import ServiceProcess, infra_env
from tests.support.prometheus import labels_of, panel_query, prometheus
from tests.support.registry import isolated_registry
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"
OPERATORS = ("alice", "bob", "carol", "ops")
KEYS = {
    **{f"{name}-key": {"principal": name, "role": "operator"} for name in OPERATORS},
    "audrey-key": {"principal": "audrey", "role": "auditor"},
    "sue-key": {"principal": "sue", "role": "submitter"},
    "gateway-key": {"principal": "gateway", "role": "service"},
}


def as_(principal: str) -> dict[str, str]:
    return bearer(f"{principal}-key")


@dataclass
class Stack:
    registry: Registry
    dlq: ServiceProcess
    http: httpx.AsyncClient
    env: dict[str, str]
    tmp: Path
    suffix: str

    def service(self, name: str) -> ServiceProcess:
        return ServiceProcess(
            "tests.support.testservice", {**self.env, "TEST_SERVICE_NAME": name}, self.tmp, name
        )

    async def failing_service(self, stack: AsyncExitStack, name: str) -> ServiceProcess:
        """The test service under ``name``, started and healthy (it fails what it is told to)."""
        service = stack.enter_context(self.service(name))
        service.start()
        await service.wait_healthy()
        return service


def readers(suffix: str) -> list[str]:
    """The services that read the test topic of a stack's registry (``svc_<suffix>``, the
    failing service; the bulk redrive's; the forger's claim; an operator's request's): a
    redrive goes back only to a topic the letter's service reads."""
    return [f"svc_{suffix}", f"svc_bulk_{suffix}", f"svc_claimed_{suffix}", f"svc_asked_{suffix}"]


async def start_stack(stack: AsyncExitStack, tmp: Path, suffix: str, kafka: str, db: str) -> Stack:
    """A fresh registry (topics of this test only) and the dead-letter service on it."""
    registry = await isolated_registry(tmp, suffix, kafka, test_consumers=readers(suffix))
    env = {**infra_env(registry.root, kafka, db), "CHORUS_API_KEYS": json.dumps(KEYS)}
    dlq = stack.enter_context(
        ServiceProcess(
            "deadletter_service",
            {**env, "CHORUS_GROUP_ID": f"dlq-{suffix}", "CHORUS_METRICS_INTERVAL_S": "0.2"},
            tmp,
        )
    )
    dlq.start()
    await dlq.wait_healthy()
    http = await stack.enter_async_context(
        httpx.AsyncClient(base_url=dlq.url, timeout=10.0, headers=as_("alice"))
    )
    return Stack(registry, dlq, http, env, tmp, suffix)


@pytest.fixture(scope="module")
async def shared(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[Stack]:
    """One dead-letter service for the tests that publish synthetic letters; each of
    them uses its own service names, so they never see each other's letters."""
    async with AsyncExitStack() as stack:
        yield await start_stack(
            stack,
            tmp_path_factory.mktemp("dlq"),
            uuid.uuid4().hex[:10],
            kafka_bootstrap,
            database_url,
        )


@pytest.fixture
async def own(
    tmp_path: Path, kafka_bootstrap: str, database_url: str, unique: str
) -> AsyncIterator[tuple[Stack, ServiceProcess]]:
    """A dead-letter service of the test's own, and beside it the test service
    ``svc_<unique>``, started and healthy (it fails what it is told to)."""
    async with AsyncExitStack() as stack:
        s = await start_stack(stack, tmp_path, unique, kafka_bootstrap, database_url)
        yield s, await s.failing_service(stack, f"svc_{unique}")


def run_cli(*args: str, url: str, actor: str | None = "alice") -> Any:
    """``chorus dlq`` with ``actor``'s API key (none when ``actor`` is None)."""
    env = {"CHORUS_DLQ_URL": url, "CHORUS_API_KEY": f"{actor}-key" if actor else ""}
    return CliRunner().invoke(cli, ["dlq", *args], env=env)


async def letters(http: httpx.AsyncClient, **params: str) -> list[dict[str, Any]]:
    response = await http.get("/v1/dead-letters", params=params)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def open_letter(http: httpx.AsyncClient, service: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = await eventually(
        lambda: letters(http, service=service),
        what=f"a dead letter of {service} to be listed",
    )
    assert len(found) == 1, found
    return found[0]


async def eventually(probe: Callable[[], Awaitable[object]], *, what: str) -> Any:
    """``wait_until`` for async probes: the probe's first truthy result."""
    result: object = await wait_until(probe, what=what)
    return result


def copies(records: list[Any], event_id: uuid.UUID) -> list[Any]:
    return [r for r in records if json.loads(r.value).get("event_id") == str(event_id)]


# -- end to end, with a real failing service -------------------------------------------------


async def test_poison_event_is_listed_redriven_after_the_fix_processed_and_redriven_only_once(
    own: tuple[Stack, ServiceProcess], kafka_bootstrap: str, unique: str, pg: asyncpg.Connection
) -> None:
    s, service = own
    name = f"svc_{unique}"

    topic = s.registry.physical_topic("test.task_submitted")
    poison = envelope(TaskSubmitted(task="poison", mode="persistent"))
    headers = [("traceparent", poison.traceparent.encode()), ("x-binary", b"\x00\xff\x10")]
    await publish(kafka_bootstrap, topic, [poison], headers=headers)

    # Listed, with the exact bytes, key and headers it arrived with.
    letter = await open_letter(s.http, name)
    assert letter["status"] == "open"
    assert letter["error"]["category"] == "persistent"
    assert letter["original_event_id"] == str(poison.event_id)
    detail = (await s.http.get(f"/v1/dead-letters/{letter['id']}")).json()
    original = detail["original"]
    assert base64.b64decode(original["value_b64"]) == encode(poison)
    assert original["value_json"]["payload"] == {
        "task": "poison", "mode": "persistent", "transient_failures": 0, "sleep_s": 0.0,
        "note": "", "url": "",
    }  # fmt: skip
    assert original["topic"] == topic
    assert original["key"] == poison.workflow_id
    assert [(h["key"], base64.b64decode(h["value_b64"])) for h in original["headers"]] == (headers)
    assert detail["consumer_group"] == name
    assert "simulated business rule violation" in detail["error"]["message"]
    assert "PersistentError" in detail["error"]["traceback"]
    assert [f["attempt"] for f in detail["failures"]] == [1]
    assert detail["failures"][0]["at"]

    # The fix is deployed: same service, same consumer group, handler repaired.
    await service.terminate()
    service.start(TEST_SERVICE_FIXED="1")
    await service.wait_healthy()

    result = run_cli("redrive", letter["id"], "--reason", "fixed in 0.1.1", url=s.dlq.url)
    assert result.exit_code == 0, result.output
    assert f"redriven {letter['id']} -> {topic} as attempt 2" in result.output

    records = await read_topic(
        kafka_bootstrap,
        [topic],
        until=lambda rs: bool(events_of(rs, "test.task_done")),
    )
    done = [d["payload"] for d in events_of(records, "test.task_done")]
    assert done == [{"task": "poison", "attempt": 2, "handled_count": 1}]
    first, again = copies(records, poison.event_id)
    assert json.loads(again.value)["attempt"] == 2
    assert again.key == first.key
    assert list(again.headers) == list(first.headers)

    # Asked again (HTTP, then CLI): refused, and nothing more is published.
    second = await s.http.post(
        f"/v1/dead-letters/{letter['id']}/redrive", json={"reason": "again"}, headers=as_("bob")
    )
    assert second.status_code == 409
    assert second.headers["content-type"].startswith(PROBLEM)
    problem = second.json()
    assert problem["status"] == 409
    assert problem["letter_status"] == "redriven"
    assert problem["resolved_by"] == "alice"
    assert "nothing was published" in problem["detail"]
    result = run_cli("redrive", letter["id"], url=s.dlq.url)
    assert result.exit_code == 1
    assert "already redriven" in result.output

    queued = await pg.fetch(
        "SELECT dispatched_at FROM deadletter_service.outbox WHERE event_id = $1",
        poison.event_id,
    )
    assert len(queued) == 1, "a second redrive must not queue the record again"
    await eventually(
        lambda: pg.fetchval(
            "SELECT dispatched_at IS NOT NULL FROM deadletter_service.outbox WHERE event_id = $1",
            poison.event_id,
        ),
        what="the redrive to be published",
    )
    records = await read_topic(kafka_bootstrap, [topic], until=lambda rs: len(rs) >= 3)
    assert len(copies(records, poison.event_id)) == 2

    # Every operation is on record, refused ones included.
    shown = (await s.http.get(f"/v1/dead-letters/{letter['id']}")).json()
    assert shown["status"] == "redriven"
    assert [(o["op"], o["actor"], o["result"], o["reason"]) for o in shown["operations"]] == [
        ("redrive", "alice", "refused", ""),
        ("redrive", "bob", "refused", "again"),
        ("redrive", "alice", "redriven", "fixed in 0.1.1"),
    ]
    audit = (await s.http.get("/v1/operations", params={"letter_id": letter["id"]})).json()
    assert audit["items"] == shown["operations"]


async def test_discard_releases_the_workflow_parked_behind_the_dead_letter(
    own: tuple[Stack, ServiceProcess], kafka_bootstrap: str, unique: str, pg: asyncpg.Connection
) -> None:
    s, _ = own
    name = f"svc_{unique}"

    topic = s.registry.physical_topic("test.task_submitted")
    blocker = envelope(TaskSubmitted(task="blocker", mode="persistent"))
    wf = blocker.workflow_id
    later = envelope(TaskSubmitted(task="later"), workflow_id=wf)
    await publish(kafka_bootstrap, topic, [blocker, later])

    letter = await open_letter(s.http, name)
    await eventually(
        lambda: pg.fetchval(f"SELECT count(*) FROM {name}.parked WHERE workflow_id = $1", wf),
        what="the later event to wait behind the dead letter",
    )

    result = run_cli("discard", letter["id"], "--reason", "customer withdrew", url=s.dlq.url, actor="carol")
    assert result.exit_code == 0, result.output
    assert f"discarded {letter['id']}; {name} was told to stop waiting" in result.output

    control = s.registry.physical_topic("event.discarded")
    records = await read_topic(
        kafka_bootstrap,
        [topic, control],
        until=lambda rs: bool(events_of(rs, "test.task_done")),
    )
    done = [d["payload"] for d in events_of(records, "test.task_done")]
    assert done == [{"task": "later", "attempt": 1, "handled_count": 1}]
    (discarded,) = events_of(records, "event.discarded")
    assert discarded["workflow_id"] == wf
    assert discarded["causation_id"] == letter["id"]
    assert discarded["payload"] == {
        "service": name,
        "consumer_group": name,
        "discarded_event_id": str(blocker.event_id),
        "reason": "customer withdrew",
        "actor": "carol",
    }

    shown = (await s.http.get(f"/v1/dead-letters/{letter['id']}")).json()
    assert shown["status"] == "discarded"
    assert shown["resolved_by"] == "carol"
    # Discarded is final: a redrive now would replay an event the workflow moved past.
    refused = await s.http.post(f"/v1/dead-letters/{letter['id']}/redrive", headers=as_("bob"))
    assert refused.status_code == 409
    assert refused.json()["letter_status"] == "discarded"


# -- synthetic letters (the test plays the runtime) ------------------------------------------


def synthetic_letter(
    registry: Registry,
    service: str,
    category: ErrorCategory,
    *,
    at: datetime,
    offset: int,
    poison: bool = False,
    original: Envelope | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
) -> Envelope:
    """An event.dead_lettered as a service's runtime would publish it, dead-lettered at ``at``
    (of ``original``, which was read from its event type's topic; a test task by default)."""
    original = original or envelope(TaskSubmitted(task=f"{service}-{offset}"))
    topic = registry.physical_topic(original.event_type)
    raw = b"\x00not an event" if poison else encode(original)
    body = EventDeadLettered(
        service=service,
        service_version="1.2.3",
        consumer_group=service,
        original=OriginalRecord(
            topic=topic,
            partition=0,
            offset=offset,
            key_b64=base64.b64encode(original.workflow_id.encode()).decode(),
            value_b64=base64.b64encode(raw).decode(),
            headers=[
                KafkaHeader(key=k, value_b64=base64.b64encode(v).decode())
                for k, v in [("x-origin", b"test"), *headers]
            ],
        ),
        error=ErrorDetail(
            category=category,
            error_class="DecodeError" if poison else "PersistentError",
            message=f"{category} failure",
        ),
        attempts=1,
        failures=[Failure(at=at, attempt=1, error_class="PersistentError", message="boom")],
        original_event_type=None if poison else original.event_type,
        original_event_id=None if poison else str(original.event_id),
        original_workflow_id=None if poison else original.workflow_id,
    )
    wrapped = envelope(body, workflow_id=original.workflow_id)
    return wrapped.model_copy(update={"occurred_at": at})


async def publish_letters(stack: Stack, kafka: str, letters_: list[Envelope]) -> None:
    await publish(kafka, stack.registry.physical_topic("event.dead_lettered"), letters_)


async def test_list_filters_groups_and_bad_filters(shared: Stack, kafka_bootstrap: str) -> None:
    now = datetime.now(timezone.utc)
    a, b = f"svc_a_{uuid.uuid4().hex[:8]}", f"svc_b_{uuid.uuid4().hex[:8]}"
    a1 = synthetic_letter(shared.registry, a, "persistent", at=now - timedelta(hours=3), offset=1)
    a2 = synthetic_letter(shared.registry, a, "decode", at=now - timedelta(hours=2), offset=2, poison=True)
    b1 = synthetic_letter(shared.registry, b, "unexpected", at=now - timedelta(hours=1), offset=3)
    b2 = synthetic_letter(shared.registry, b, "persistent", at=now - timedelta(minutes=5), offset=4)
    # a1 twice: a redelivered dead letter is stored once.
    await publish_letters(shared, kafka_bootstrap, [a1, a2, b1, b2, a1])

    async def both_services() -> bool:
        return len(await letters(shared.http, service=a)) + len(await letters(shared.http, service=b)) == 4

    await eventually(both_services, what="four letters")

    async def ids(**params: str) -> list[str]:
        return [x["id"] for x in await letters(shared.http, **params)]

    def iso(t: datetime) -> str:
        return t.isoformat()

    assert await ids(service=a) == [str(a2.event_id), str(a1.event_id)]  # newest first
    assert await ids(service=a, category="decode") == [str(a2.event_id)]
    assert await ids(service=b, category="persistent") == [str(b2.event_id)]
    assert await ids(service=a, event_type="test.task_submitted") == [str(a1.event_id)]
    assert await ids(service=a, since=iso(now - timedelta(minutes=150))) == [str(a2.event_id)]
    assert await ids(service=a, until=iso(now - timedelta(minutes=150))) == [str(a1.event_id)]
    assert await ids(service=b, limit="1") == [str(b2.event_id)]
    assert await ids(service=a, status="open") == await ids(service=a)
    assert await ids(service=a, status="redriven") == []

    poison = (await shared.http.get(f"/v1/dead-letters/{a2.event_id}")).json()
    assert poison["original"]["value_is_json"] is False
    assert base64.b64decode(poison["original"]["value_b64"]) == b"\x00not an event"
    assert poison["original_event_type"] is None

    groups = (await shared.http.get("/v1/dead-letters/groups", params={"service": b})).json()
    assert sorted((g["category"], g["status"], g["count"]) for g in groups["groups"]) == [
        ("persistent", "open", 1),
        ("unexpected", "open", 1),
    ]

    for params, parameter in [
        ({"category": "fatal"}, "category"),
        ({"status": "closed"}, "status"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-01-01T00:00:00"}, "until"),
        ({"since": "0001-01-01T00:00:00+01:00"}, "since"),  # before the year 1 in UTC
        ({"service": "a\x00b"}, "service"),
        ({"limit": "0"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"servce": a}, "servce"),
    ]:
        response = await shared.http.get("/v1/dead-letters", params=params)
        assert response.status_code == 400, params
        assert response.headers["content-type"].startswith(PROBLEM)
        assert response.json()["parameter"] == parameter
        assert parameter in response.json()["title"]

    # The CLI speaks the same API: a table, JSON, and the bad parameter named on stderr.
    listed = run_cli("list", "--service", a, url=shared.dlq.url)
    assert listed.exit_code == 0, listed.output
    assert str(a1.event_id) in listed.output and str(a2.event_id) in listed.output
    assert "2 dead letter(s)" in listed.output
    as_json = run_cli("list", "--service", a, "--since", "150m", "--json", url=shared.dlq.url)
    assert [x["id"] for x in json.loads(as_json.output)["items"]] == [str(a2.event_id)]
    bad = run_cli("list", "--category", "fatal", url=shared.dlq.url)
    assert bad.exit_code == 2
    assert "category" in bad.output
    shown = run_cli("show", str(a1.event_id), url=shared.dlq.url)
    assert shown.exit_code == 0, shown.output
    assert "value (JSON)" in shown.output and f"{a}-1" in shown.output
    assert "x-origin: test" in shown.output


async def test_unknown_ids_and_bad_requests_are_answered_as_problems(shared: Stack) -> None:
    unknown = uuid.uuid4()
    for method, path, body in [
        ("GET", f"/v1/dead-letters/{unknown}", None),
        ("GET", "/v1/dead-letters/not-a-uuid", None),
        ("POST", f"/v1/dead-letters/{unknown}/redrive", {}),
        ("POST", f"/v1/dead-letters/{unknown}/discard", {"reason": "x"}),
    ]:
        response = await shared.http.request(method, path, json=body)
        assert response.status_code == 404, (method, path)
        assert response.headers["content-type"].startswith(PROBLEM)
        assert response.json()["status"] == 404

    # Body fields are 422s naming the field; the actor is never the body's to say.
    bad_requests: list[tuple[str, dict[str, Any], str]] = [
        (f"/v1/dead-letters/{unknown}/discard", {}, "/reason"),
        (f"/v1/dead-letters/{unknown}/discard", {"reason": "  "}, "/reason"),
        (f"/v1/dead-letters/{unknown}/redrive", {"actor": "mallory"}, "/actor"),
        ("/v1/dead-letters/redrive", {"filter": {}}, "/filter"),
        ("/v1/dead-letters/redrive", {}, "/filter"),
        ("/v1/dead-letters/redrive", {"filter": {"service": "x", "status": "discarded"}}, "/filter/status"),
        ("/v1/dead-letters/redrive", {"filter": {"categry": "x"}}, "/filter/categry"),
    ]
    for path, request, pointer in bad_requests:
        response = await shared.http.post(path, json=request)
        assert response.status_code == 422, (path, request, response.text)
        assert response.headers["content-type"].startswith(PROBLEM)
        assert [e["pointer"] for e in response.json()["errors"]] == [pointer], response.text
    response = await shared.http.post(
        f"/v1/dead-letters/{unknown}/redrive",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.headers["content-type"].startswith(PROBLEM)
    response = await shared.http.get("/v1/operations", params={"letter_id": "nope"})
    assert response.status_code == 400
    assert response.json()["parameter"] == "letter_id"

    missing = run_cli("show", str(unknown), url=shared.dlq.url)
    assert missing.exit_code == 1
    assert f"no dead letter with id {unknown}" in missing.output
    away = run_cli("list", url=f"http://127.0.0.1:{free_port()}")
    assert away.exit_code == 69
    assert "cannot reach the dead-letter service" in away.output


async def test_bulk_redrive_publishes_each_matching_open_letter_once(
    shared: Stack, kafka_bootstrap: str
) -> None:
    now = datetime.now(timezone.utc)
    target, other = f"svc_bulk_{shared.suffix}", f"svc_keep_{uuid.uuid4().hex[:8]}"
    hits = [
        synthetic_letter(shared.registry, target, "persistent", at=now - timedelta(minutes=m), offset=m)
        for m in (30, 20)
    ]
    miss = synthetic_letter(shared.registry, target, "decode", at=now, offset=7, poison=True)
    kept = synthetic_letter(shared.registry, other, "persistent", at=now, offset=8)
    await publish_letters(shared, kafka_bootstrap, [*hits, miss, kept])
    await eventually(lambda: _count(shared, target, 3), what="the letters of the bulk test to be stored")
    await eventually(lambda: _count(shared, other, 1), what="the letter to keep")

    result = run_cli(
        "redrive", "--service", target, "--category", "persistent", "--reason", "bulk fix",
        url=shared.dlq.url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "2 dead letter(s) redriven" in result.output
    oldest_first = [line.split()[1] for line in result.output.splitlines() if line.startswith("redriven ")]
    assert oldest_first == [str(h.event_id) for h in hits]
    again = await shared.http.post(
        "/v1/dead-letters/redrive", json={"filter": {"service": target, "category": "persistent"}}
    )
    assert again.status_code == 200
    assert again.json()["count"] == 0, "already redriven letters are not published again"

    statuses = {x["id"]: x["status"] for x in await letters(shared.http, service=target)}
    assert statuses == {
        str(hits[0].event_id): "redriven",
        str(hits[1].event_id): "redriven",
        str(miss.event_id): "open",
    }
    assert [x["status"] for x in await letters(shared.http, service=other)] == ["open"]

    # The originals are back on their topic, one attempt further.
    originals = [
        json.loads(base64.b64decode(EventDeadLettered.model_validate(h.payload).original.value_b64))
        for h in hits
    ]
    wanted = {o["event_id"] for o in originals}
    records = await read_topic(
        kafka_bootstrap,
        [shared.registry.physical_topic("test.task_submitted")],
        until=lambda rs: wanted <= {json.loads(r.value)["event_id"] for r in rs},
    )
    republished = [json.loads(r.value) for r in records if json.loads(r.value)["event_id"] in wanted]
    # Different workflows, so different partitions: no order between them on the topic.
    assert sorted((e["event_id"], e["attempt"]) for e in republished) == sorted(
        (o["event_id"], 2) for o in originals
    )
    ops = (await shared.http.get("/v1/operations", params={"op": "redrive", "actor": "alice"})).json()
    bulk = [o for o in ops["items"] if o["letter_id"] in {str(h.event_id) for h in hits}]
    assert len(bulk) == 2
    assert all(o["detail"]["bulk"] and o["reason"] == "bulk fix" for o in bulk)


async def test_a_forged_letter_is_never_redriven_onto_a_topic_its_service_does_not_read(
    shared: Stack, kafka_bootstrap: str, pg: asyncpg.Connection
) -> None:
    """Any runtime principal may write event.dead_lettered, naming any service and topic. A
    letter claiming the test topic's reader dead-lettered a timer.schedule from the timers'
    topic (which only the timer service reads) would have an operator's redrive fire any
    envelope anywhere; it is refused, one at a time and in bulk, and nothing is published."""
    service = f"svc_claimed_{shared.suffix}"  # reads the test topic, and nothing else
    fired = envelope(TaskSubmitted(task="forged"))
    fire = FireTarget(
        topic=shared.registry.physical_topic("test.task_submitted"),
        key=fired.workflow_id,
        value=json.loads(encode(fired)),
    )
    timer = envelope(
        TimerSchedule(timer_id=f"t-{uuid.uuid4().hex[:8]}", due_at=datetime.now(timezone.utc), fire=fire)
    )
    forged = synthetic_letter(
        shared.registry, service, "persistent", at=datetime.now(timezone.utc), offset=99, original=timer
    )
    await publish_letters(shared, kafka_bootstrap, [forged])
    letter = await eventually(
        lambda: _letter_of(shared, str(forged.event_id)), what="the forged letter to be stored"
    )
    assert letter["original"]["topic"] == shared.registry.physical_topic("timer.schedule")

    one = await shared.http.post(f"/v1/dead-letters/{forged.event_id}/redrive", json={"reason": "looks fine"})
    assert one.status_code == 409, one.text
    problem = one.json()
    assert f"{service} does not read chorus.timers" in problem["detail"]
    assert problem["letter_status"] == "open"
    bulk = await shared.http.post(
        "/v1/dead-letters/redrive", json={"filter": {"service": service, "status": "open"}, "reason": "all"}
    )
    assert bulk.status_code == 200 and str(forged.event_id) not in {
        d["letter"]["id"] for d in bulk.json()["items"]
    }
    shown = (await shared.http.get(f"/v1/dead-letters/{forged.event_id}")).json()
    assert shown["status"] == "open"  # an operator may still discard it
    assert [(o["result"], o["detail"].get("bulk", False)) for o in shown["operations"]] == [
        ("refused", True),
        ("refused", False),
    ]
    queued = await pg.fetchval(
        "SELECT count(*) FROM deadletter_service.outbox WHERE event_id = $1", timer.event_id
    )
    assert queued == 0, "nothing of the forged letter is queued for the timers' topic"


async def test_an_original_its_stated_producer_did_not_sign_is_never_redriven(
    shared: Stack, kafka_bootstrap: str, pg: asyncpg.Connection
) -> None:
    """A letter of an approval "from the gate" that the gate never signed (what a consumer
    dead-letters as unauthorized, or a forged letter) would have a redrive put it on the
    approvals topic as the dead-letter service. It is refused, one at a time and in bulk;
    the same approval with the gate's own signature goes back."""
    unsigned = approval(f"wf-forged-{shared.suffix}")
    signed = approval(f"wf-signed-{shared.suffix}")
    raw = encode(signed)
    gate = local_signer("approval_gate").header(raw)
    at = datetime.now(timezone.utc)
    forged = synthetic_letter(
        shared.registry, "payment_agent", "unauthorized", at=at, offset=7, original=unsigned
    )
    real = synthetic_letter(
        shared.registry, "payment_agent", "persistent", at=at, offset=8, original=signed, headers=[gate]
    )
    await publish_letters(shared, kafka_bootstrap, [forged, real])
    await eventually(lambda: _letter_of(shared, str(real.event_id)), what="the letters to be stored")
    await eventually(lambda: _letter_of(shared, str(forged.event_id)), what="the letters to be stored")

    one = await shared.http.post(f"/v1/dead-letters/{forged.event_id}/redrive", json={"reason": "retry"})
    assert one.status_code == 409, one.text
    assert "not signed by who states it" in one.json()["detail"]
    assert "chorus-signature" in one.json()["detail"]
    bulk = await shared.http.post(
        "/v1/dead-letters/redrive",
        json={"filter": {"service": "payment_agent", "event_type": "approval.decided"}, "reason": "all"},
    )
    assert bulk.status_code == 200, bulk.text
    assert {d["letter"]["id"] for d in bulk.json()["items"]} == {str(real.event_id)}
    assert (await _letter_of(shared, str(forged.event_id)) or {})["status"] == "open"
    queued = await pg.fetch(
        "SELECT event_id FROM deadletter_service.outbox WHERE event_id = ANY($1::uuid[])",
        [unsigned.event_id, signed.event_id],
    )
    assert [r["event_id"] for r in queued] == [signed.event_id]


async def _letter_of(stack: Stack, letter_id: str) -> dict[str, Any] | None:
    answer = await stack.http.get(f"/v1/dead-letters/{letter_id}")
    return answer.json() if answer.status_code == 200 else None


async def _count(stack: Stack, service: str, n: int) -> bool:
    return len(await letters(stack.http, service=service)) == n


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


async def test_metrics_show_depth_by_category_and_service_and_the_oldest_age(
    shared: Stack, kafka_bootstrap: str, tmp_path: Path
) -> None:
    now = datetime.now(timezone.utc)
    svc = f"svc_metrics_{uuid.uuid4().hex[:8]}"
    old = synthetic_letter(shared.registry, svc, "persistent", at=now - timedelta(hours=5), offset=1)
    new = synthetic_letter(shared.registry, svc, "persistent", at=now, offset=2)
    decode = synthetic_letter(shared.registry, svc, "decode", at=now, offset=3, poison=True)
    await publish_letters(shared, kafka_bootstrap, [old, new, decode])

    def depth(text: str) -> dict[str, float]:
        found = samples(text, "chorus_deadletters_open")
        return {dict(k)["category"]: v for k, v in found.items() if dict(k)["service_name"] == svc}

    def metrics_when(wanted: dict[str, float]) -> Callable[[], Awaitable[str | None]]:
        async def probe() -> str | None:
            text = (await shared.http.get("/metrics")).text
            return text if depth(text) == wanted else None

        return probe

    text: str = await eventually(
        metrics_when({"persistent": 2, "decode": 1}), what="depth gauges of the new letters"
    )
    (age,) = [
        v
        for k, v in samples(text, "chorus_deadletters_oldest_open_age_seconds").items()
        if dict(k)["service_name"] == svc
    ]
    assert 5 * 3600 <= age < 5 * 3600 + 300

    # The dead-letter dashboard in a deployment's Prometheus: the panel's own query, the
    # dead-letter service scraped as a target labelled with its own name and release.
    target = {"service": "deadletter_service", "release": "main"}
    scraped = [{"targets": [shared.dlq.url.removeprefix("http://")], "labels": target}]
    panel = panel_query("chorus-dead-letters", "Open dead letters", service=".*")
    with prometheus(tmp_path / "prometheus", scraped) as url:
        shown = await labels_of(url, panel, what="the open dead letters panel")
    assert {(s.get("service_name"), s["category"]) for s in shown if s.get("service_name") == svc} == {
        (svc, "persistent"),
        (svc, "decode"),
    }, shown

    for letter in (old, new):
        response = await shared.http.post(
            f"/v1/dead-letters/{letter.event_id}/discard", json={"reason": "stale"}, headers=as_("ops")
        )
        assert response.status_code == 200, response.text
    await eventually(metrics_when({"persistent": 0, "decode": 1}), what="resolved letters to leave the depth")


@pytest.mark.parametrize(
    ("body", "status", "pointer"),
    [
        (b'{"reason": ' + b"[" * 5000 + b"]" * 5000 + b"}", 422, "/"),
        (b'{"reason": "al\\u0000ice"}', 422, "/reason"),
        (b'{"reason": NaN}', 422, "/"),
        (json.dumps({"reason": "r" * 2001}).encode(), 422, "/reason"),
        (b'{"reason": "' + b"a" * 2_000_000 + b'"}', 413, None),
    ],
    ids=["deep", "nul", "nan", "long-reason", "over-1-MiB"],
)
async def test_hostile_operator_bodies_are_problems_never_server_errors(
    shared: Stack, body: bytes, status: int, pointer: str | None
) -> None:
    response = await shared.http.post(
        f"/v1/dead-letters/{uuid.uuid4()}/discard", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    if pointer is not None:
        assert response.json()["errors"][0]["pointer"] == pointer, response.text


async def test_every_route_needs_a_key_reads_need_an_operator_or_auditor_and_changes_an_operator(
    shared: Stack, kafka_bootstrap: str
) -> None:
    svc = f"svc_auth_{uuid.uuid4().hex[:8]}"
    letter = synthetic_letter(shared.registry, svc, "persistent", at=datetime.now(timezone.utc), offset=1)
    await publish_letters(shared, kafka_bootstrap, [letter])
    await eventually(lambda: _count(shared, svc, 1), what="the letter to be stored")
    one = f"/v1/dead-letters/{letter.event_id}"
    reads = ["/v1/dead-letters", "/v1/dead-letters/groups", one, "/v1/operations"]
    changes: list[tuple[str, dict[str, Any]]] = [
        (f"{one}/redrive", {}),
        (f"{one}/discard", {"reason": "not mine to give up"}),
        ("/v1/dead-letters/redrive", {"filter": {"service": svc}}),
    ]
    async with httpx.AsyncClient(base_url=shared.dlq.url, timeout=10.0) as anonymous:
        for path in reads:
            for headers, status in [
                ({}, 401),
                (bearer("stolen-or-made-up"), 401),
                (as_("sue"), 403),
                (as_("gateway"), 403),
                (as_("audrey"), 200),
            ]:
                response = await anonymous.get(path, headers=headers)
                assert response.status_code == status, (path, headers, response.text)
                if status == 401:
                    assert response.headers["www-authenticate"] == "Bearer"
        for path, body in changes:
            for headers, status in [({}, 401), (as_("sue"), 403), (as_("audrey"), 403)]:
                response = await anonymous.post(path, json=body, headers=headers)
                assert response.status_code == status, (path, headers, response.text)
                assert response.headers["content-type"].startswith(PROBLEM)
            # A page on another site can POST a form or text/plain without a preflight:
            # refused before it is read, even with a valid key.
            form = await anonymous.post(path, content=b"reason=x", headers={
                **as_("alice"), "content-type": "application/x-www-form-urlencoded"
            })  # fmt: skip
            assert form.status_code == 415, form.text
    # Nothing above changed the letter; the CLI without a key says how to give one.
    shown = (await shared.http.get(one)).json()
    assert (shown["status"], shown["operations"]) == ("open", [])
    keyless = run_cli("show", str(letter.event_id), url=shared.dlq.url, actor=None)
    assert keyless.exit_code == 2
    assert "CHORUS_API_KEY" in keyless.output
    auditor = run_cli("redrive", str(letter.event_id), url=shared.dlq.url, actor="audrey")
    assert auditor.exit_code == 77
    assert "auditor may not do this" in auditor.output
    # The operator who acts is the key's principal, on the letter and in the audit trail.
    done = run_cli("discard", str(letter.event_id), "--reason", "dup", url=shared.dlq.url, actor="carol")
    assert done.exit_code == 0, done.output
    shown = (await shared.http.get(one, headers=as_("audrey"))).json()
    assert (shown["resolved_by"], [o["actor"] for o in shown["operations"]]) == ("carol", ["carol"])


async def test_an_operators_redrive_of_a_workflow_waits_for_its_letter_then_redrives_it_once_as_them(
    shared: Stack, kafka_bootstrap: str
) -> None:
    """An operator's request (workflow.redrive_requested, the gateway's word for a bulk
    action) that arrives before the workflow's dead letter: the service looks again until the
    letter is stored, redrives it once with the operator as the operation's actor; the same
    request delivered again redrives nothing more."""
    service = f"svc_asked_{shared.suffix}"
    original = envelope(TaskSubmitted(task=f"{service}-1"), workflow_id=f"wf-asked-{uuid.uuid4().hex[:8]}")
    letter = synthetic_letter(
        shared.registry, service, "persistent", at=datetime.now(timezone.utc), offset=11, original=original
    )
    bulk_id = f"bulk-{uuid.uuid4().hex}"
    asked = envelope(
        RedriveRequested(requested_by="carol", reason="the CRM is back", bulk_id=bulk_id),
        workflow_id=original.workflow_id,
    )
    topic = shared.registry.physical_topic("workflow.redrive_requested")
    await publish(kafka_bootstrap, topic, [asked])
    await asyncio.sleep(2.0)  # taken, and nothing of the workflow to redrive yet
    await publish_letters(shared, kafka_bootstrap, [letter])

    async def redriven() -> dict[str, Any] | None:
        found = await _letter_of(shared, str(letter.event_id))
        return found if found is not None and found["status"] == "redriven" else None

    await eventually(redriven, what="the letter redriven for the operator's request")
    await publish(kafka_bootstrap, topic, [asked])  # delivered again: the same request
    await asyncio.sleep(2.0)
    ops = (await shared.http.get("/v1/operations", params={"letter_id": str(letter.event_id)})).json()[
        "items"
    ]
    assert [(o["op"], o["actor"], o["reason"], o["result"]) for o in ops] == [
        ("redrive", "carol", f"the CRM is back (bulk action {bulk_id})", "redriven")
    ]
