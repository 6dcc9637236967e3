"""The testing kit's other half: a service against real Kafka and PostgreSQL in a test.

:mod:`chorus.testing` runs handlers in memory; this module is for the integration test
beside it, which runs the service as it runs in production (``chorus.runtime.runner.running``)
on a real broker and database. A test takes an *isolated* copy of the registry (every topic
renamed with the test's own suffix, so tests that share a broker never read each other's
events), provisions its topics, publishes a workflow's first event and reads what the
service emitted::

    registry = await isolated_registry(tmp_path, suffix, bootstrap)
    async with running(SPEC, Settings(schemas_dir=str(registry.root), ...), registry=registry):
        await publish(registry, bootstrap, TicketReceived(...), workflow_id="wf-1")
        done = await read_events(registry, bootstrap, "ticket.answered", workflow_id="wf-1")

The test process talks to Kafka as whoever ``CHORUS_KAFKA_*`` names (an admin on a local
broker): it creates topics. A service that emits personal data (every workflow's end names
who decided) seals it with a key service: ``key_store()`` runs the platform's in the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.registry import (
    PROJECT_FILE,
    Registry,
    default_schemas_dir,
    load_registry,
    platform_schemas_dir,
    read_project,
)
from chorus.kernel.codec import decode, encode
from chorus.kernel.kafka import make_admin, make_consumer, make_producer, stop_client
from chorus.privacy.feature import KEY_SERVICE_CA, KEY_SERVICE_TLS, key_service_trust
from chorus.privacy.signing import make_keys
from chorus.runtime.runner import LOCAL_REGION
from chorus.testing import make_event
from chorus.web.tls import make_local_tls

__all__ = ["isolated_registry", "isolated_schemas", "key_store", "provision", "publish", "read_events"]


def isolated_schemas(
    tmp: Path,
    suffix: str,
    *,
    root: Path | None = None,
    partitions: int | None = 1,
    add_topics: Sequence[str] = (),
) -> Path:
    """A complete copy of the registry at ``root`` (default: the project's, found from the
    working directory) under ``tmp``, every topic renamed ``<topic>.t<suffix>``. A project's
    registry is copied with the platform's it extends. ``partitions`` overrides every topic's
    partition count (1 keeps a shared broker light; None keeps the registry's);
    ``add_topics`` are more topic files (YAML text) to include."""
    source = root or default_schemas_dir()
    project = read_project(source)
    copy = tmp / f"schemas-{suffix}"
    if project is not None and project.extends == "platform":
        shutil.copytree(platform_schemas_dir(), copy, ignore=shutil.ignore_patterns("*.md"))
        _overlay(source, copy)
        # The copy stands alone (extends none) and imports the project's event models from
        # where the project keeps them.
        contracts_path = project.contracts_path or str(source.resolve().parent / "services")
        project = project.model_copy(update={"extends": "none", "contracts_path": contracts_path})
        (copy / PROJECT_FILE).write_text(yaml.safe_dump(project.model_dump(), sort_keys=False))
    else:
        shutil.copytree(source, copy)
    topics = copy / "topics"
    for i, text in enumerate(add_topics):
        (topics / f"added-{i}.yaml").write_text(text)
    for path in list(topics.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        data["topic"] = f"{data['topic']}.t{suffix}"
        if partitions is not None:
            data["partitions"] = partitions
        path.unlink()
        (topics / f"{data['topic']}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    principals_file = copy / "principals.yaml"
    if principals_file.is_file():
        principals = yaml.safe_load(principals_file.read_text())
        for service in (principals.get("services") or {}).values():
            for access in ("writes", "reads"):
                service[access] = [f"{topic}.t{suffix}" for topic in service.get(access, [])]
        principals_file.write_text(yaml.safe_dump(principals, sort_keys=False))
    return copy


async def isolated_registry(
    tmp: Path, suffix: str, bootstrap: str, *, root: Path | None = None, partitions: int | None = 1
) -> Registry:
    """:func:`isolated_schemas` loaded, its topics created: a test's own registry (its
    ``root`` is what the service's ``schemas_dir`` setting names)."""
    registry = load_registry(isolated_schemas(tmp, suffix, root=root, partitions=partitions))
    await provision(registry, bootstrap)
    return registry


def _overlay(project: Path, copy: Path) -> None:
    """A project's files over the copy of the platform's, its principals and workflow types
    merged as the registry merges them (the copy stands alone)."""
    union = load_registry(project)
    for folder in ("topics", "events", "examples"):
        if (project / folder).is_dir():
            shutil.copytree(project / folder, copy / folder, dirs_exist_ok=True)
    principals = union.principals.model_dump(mode="json", exclude={"platform"})
    (copy / "principals.yaml").write_text(yaml.safe_dump(principals, sort_keys=False))
    workflows = {name: declared.model_dump(mode="json") for name, declared in union.workflows.items()}
    (copy / "workflows.yaml").write_text(yaml.safe_dump(workflows, sort_keys=False))


async def provision(registry: Registry, bootstrap: str) -> list[str]:
    """Create the registry's topics (those missing); returns every physical topic name."""
    names: list[str] = []
    for spec in registry.topics.values():
        wanted = [(physical, spec.partitions) for physical in spec.physical_topics()]
        names.extend(name for name, _ in wanted)
        configs = {"max.message.bytes": str(spec.max_message_bytes)} if spec.max_message_bytes else None
        await ensure_topics(bootstrap, wanted, configs=configs)
    return names


async def publish(
    registry: Registry,
    bootstrap: str,
    event: EventModel | Envelope,
    *,
    workflow_id: str | None = None,
    workflow_type: str = "test",
) -> Envelope:
    """``event`` as the first event of a workflow, on its topic (keyed by the workflow id);
    an ``Envelope`` (one published before) goes out again as it is: a redelivery."""
    envelope = (
        event
        if isinstance(event, Envelope)
        else make_event(event, workflow_id=workflow_id, workflow_type=workflow_type).envelope
    )
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(
            registry.physical_topic(envelope.event_type), encode(envelope), key=envelope.workflow_id.encode()
        )
    finally:
        await stop_client(producer)
    return envelope


async def read_events(
    registry: Registry,
    bootstrap: str,
    event_type: str,
    *,
    workflow_id: str | None = None,
    count: int = 1,
    timeout_s: float = 60.0,
    settle_s: float = 0.0,
) -> list[Any]:
    """The events of ``event_type`` (of ``workflow_id``, if given) on its topic, read from the
    beginning once ``count`` of them arrived, then ``settle_s`` longer (to see a duplicate
    that should not come); AssertionError after ``timeout_s`` with what was seen."""
    topics = registry.topic_for(event_type).physical_topics()
    consumer = make_consumer(bootstrap, *topics, group_id=None)
    await consumer.start()
    found: list[Any] = []
    seen: list[str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    settled: float | None = None
    try:
        while settled is None or loop.time() < settled:
            if settled is None and loop.time() > deadline:
                raise AssertionError(
                    f"{len(found)} of {count} {event_type} event(s) after {timeout_s}s on {topics}; "
                    f"seen: {seen[-10:]}"
                )
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                for record in batch:
                    event = decode(record.value, registry, accept=None, max_bytes=10 * 1024 * 1024)
                    seen.append(f"{event.envelope.event_type} of {event.envelope.workflow_id}")
                    if event.envelope.event_type == event_type and workflow_id in (
                        None,
                        event.envelope.workflow_id,
                    ):
                        found.append(event)
            if settled is None and len(found) >= count:
                settled = loop.time() + settle_s
    finally:
        await stop_client(consumer)
    return found


@contextmanager
def reaching_key_service(url: str, ca_file: str) -> Iterator[None]:
    """``CHORUS_KEY_STORES`` naming the key service at ``url`` (for the local region) and
    ``CHORUS_KEY_SERVICE_CA_FILE`` the CA that signed its certificate, while the block runs;
    then both as they were. Settings made meanwhile seal through it."""
    changed = {"CHORUS_KEY_STORES": json.dumps({LOCAL_REGION: url}), KEY_SERVICE_CA: ca_file}
    previous = {name: os.environ.get(name) for name in changed}
    os.environ.update(changed)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@asynccontextmanager
async def key_store(timeout_s: float = 60.0) -> AsyncIterator[str]:
    """The platform's key service in a process of its own on a free port, and
    ``CHORUS_KEY_STORES`` naming it while it runs (settings made meanwhile find it): services
    under test seal personal data as in production. It keeps its keys in the database of
    ``CHORUS_DATABASE_URL``. Yields its URL.

    First, the signing keys the registry (of the working directory, or
    ``CHORUS_SCHEMAS_DIR``) needs and ``CHORUS_SIGNING_DIR`` lacks are made, as ``chorus
    access signing-keys`` makes them: every service of a project signs its own timer
    commands, so a new service needs a key pair before anything runs."""
    signing_dir = os.environ.get("CHORUS_SIGNING_DIR")
    if signing_dir:
        schemas = os.environ.get("CHORUS_SCHEMAS_DIR")
        make_keys(Path(signing_dir), load_registry(Path(schemas) if schemas else None).signers())
    port, api_port = _free_port(), _free_port()
    url = f"https://127.0.0.1:{api_port}"
    tls = key_service_tls()
    log = tempfile.NamedTemporaryFile(prefix="chorus-key-service-", suffix=".log", delete=False)  # noqa: SIM115
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chorus.platform.key_service",  # a platform service: the runtime starts it, never imports it
        env={
            **os.environ,
            **tls,
            "CHORUS_HTTP_PORT": str(port),
            "CHORUS_API_PORT": str(api_port),
            "PYTHONUNBUFFERED": "1",
        },
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        await _healthy(
            f"http://127.0.0.1:{port}", url, tls[KEY_SERVICE_CA], process, Path(log.name), timeout_s
        )
        with reaching_key_service(url, tls[KEY_SERVICE_CA]):
            yield url
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()
        log.close()
        os.unlink(log.name)  # what it said matters only when it failed, and is raised then


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def _healthy(
    url: str, api: str, ca_file: str, process: asyncio.subprocess.Process, log: Path, timeout_s: float
) -> None:
    """Until the key service is up and its API answers over TLS (refusing no credential)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with httpx.AsyncClient(timeout=2.0, verify=key_service_trust(ca_file)) as client:
        while loop.time() < deadline:
            if process.returncode is not None:
                raise RuntimeError(f"the key service exited with {process.returncode}:\n{_tail(log)}")
            try:
                healthy = (await client.get(f"{url}/health")).status_code == 200
                if healthy and (await client.get(f"{api}/v1/data-keys/local-0")).status_code < 500:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"the key service was not healthy within {timeout_s}s:\n{_tail(log)}")


def key_service_tls(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The key service's certificate and its callers' trust, as environment variables: the
    environment's own (``make up`` sets them for the local stack), else a local certificate
    authority's made for this run (chorus.web.tls.make_local_tls)."""
    names = (*KEY_SERVICE_TLS, KEY_SERVICE_CA)
    if all(environ.get(name) for name in names):
        return {name: environ[name] for name in names}
    made = make_local_tls(Path(tempfile.mkdtemp(prefix="chorus-tls-")), "key_service")
    return dict(zip(names, (str(made.cert_file), str(made.key_file), str(made.ca_file)), strict=True))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def ensure_topics(
    bootstrap: str,
    topics: Iterable[tuple[str, int]],
    *,
    replication_factor: int = 1,
    configs: dict[str, str] | None = None,
) -> list[str]:
    """Create the (name, partitions) topics that do not exist yet; returns the created names."""
    admin = make_admin(bootstrap)
    await admin.start()
    created: list[str] = []
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                topic_configs=dict(configs or {}),
            )
            for name, partitions in topics
            if name not in existing
        ]
        if wanted:
            response = await admin.create_topics(wanted)
            for topic_error in response.topic_errors:
                name, code = topic_error[0], topic_error[1]
                message = topic_error[2] if len(topic_error) > 2 else ""
                if code == TopicAlreadyExistsError.errno:
                    continue  # a concurrent creator won the race; the topic exists
                if code != 0:
                    raise RuntimeError(f"could not create topic {name!r}: error {code} {message}")
                created.append(name)
    finally:
        await admin.close()
    return created
