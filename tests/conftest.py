"""Test infrastructure shared by every suite.

Integration tests run against the real local stack. The session fixture starts
Kafka and PostgreSQL through deploy/local (a no-op when they already run); if
either cannot start, every integration test errors with the scripts' log tail.
Nothing is ever skipped for missing infrastructure.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chorus.base import tracing
from chorus.base.settings import LOCAL_DATABASE_URL, LOCAL_KAFKA
from chorus.observability.tracing import OtelSpans
from chorus.privacy.feature import KEY_SERVICE_CA
from chorus.testing.stack import key_service_tls, reaching_key_service
from chorus.tools.devstack import free_port
from tests.support.database import connected
from tests.support.processes import ServiceProcess, run_captured
from tests.support.registry import delete_created_topics, ensure_service_users

ROOT = Path(__file__).resolve().parent.parent
# Tests run services on the local stack, with its demo secrets (as `make test` sets it).
os.environ.setdefault("CHORUS_ENV", "demo")
# In-process services call the tests' own HTTP servers on loopback; services the dev stack
# starts may call only its sandbox (DevStack sets their CHORUS_EGRESS_ALLOW).
os.environ.setdefault("CHORUS_EGRESS_ALLOW", "127.0.0.0/8,::1/128")
LOCAL = Path(os.environ.get("CHORUS_LOCAL", ROOT / ".local"))

# Fuzzing in `make test` is reproducible (a fixed derivation of examples, no example
# database) and bounded; HYPOTHESIS_PROFILE=deep explores far more, locally.
settings.register_profile(
    "ci",
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("deep", max_examples=20_000, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# pytest-xdist hands test files to the workers in collection order once this hook has run
# (make test passes --no-loadscope-reorder: its own order, by number of tests, put the
# one-test files that take minutes last, and one worker idled while the other ran them).
# The files that take longest go first, every other file keeps its place after them; the
# ones that keep a core busy (building the wheel, schemathesis)
# alternate with ones that mostly wait on Kafka, so that each worker gets one of each.
LONGEST_FIRST = (
    "tests/deploy/test_runtime_wheel.py",  # cpu
    "tests/e2e/test_workflows.py",
    "tests/reliability/test_short_suite.py",
    "tests/services/rollout_service/test_on_kafka.py",
    "tests/services/gateway/test_api.py",  # cpu
    "tests/services/audit_projector/test_on_kafka.py",
    "tests/tools/test_cli_produce_subscribe.py",
    "tests/deploy/test_helm_chart.py",  # cpu
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


def _start(script: str) -> None:
    proc = run_captured([str(ROOT / "deploy" / "local" / script), "start"], timeout_s=600)
    if proc.returncode != 0:
        pytest.fail(
            f"deploy/local/{script} start failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}",
            pytrace=False,
        )


def _login_as_admin() -> None:
    """The test process talks to Kafka as the local cluster's admin (as `make test` sets
    it up), unless the environment already names a principal; services started through
    DevStack log in as their own principals (CHORUS_KAFKA_USERS_DIR)."""
    os.environ.setdefault("CHORUS_KAFKA_USERS_DIR", str(LOCAL / "kafka" / "secrets" / "users"))
    if "CHORUS_KAFKA_SASL_USERNAME" in os.environ or "CHORUS_KAFKA_SECURITY_PROTOCOL" in os.environ:
        return
    for line in (LOCAL / "kafka" / "admin.env").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            os.environ[name] = value


@pytest.fixture(scope="session")
async def kafka_bootstrap() -> AsyncIterator[str]:
    bootstrap = os.environ.get("CHORUS_KAFKA_BOOTSTRAP", LOCAL_KAFKA)
    if "CHORUS_KAFKA_BOOTSTRAP" not in os.environ:
        _start("kafka.sh")
    _login_as_admin()
    await ensure_service_users(bootstrap)
    yield bootstrap
    await delete_created_topics(bootstrap)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    url = os.environ.get("CHORUS_DATABASE_URL", LOCAL_DATABASE_URL)
    _start("postgres.sh")
    yield url


@pytest.fixture
async def pg(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    async with connected(database_url) as conn:
        yield conn


@pytest.fixture
def unique() -> str:
    """A short unique suffix so tests never share topics, groups or ids."""
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="module", autouse=True)
def _sealing_as_in_production(request: pytest.FixtureRequest) -> None:
    """The session's key service, started before anything of a module that has a test on the
    infrastructure (a module's own services read CHORUS_KEY_STORES when they start)."""
    prefix = f"{request.node.nodeid}::"
    items = request.session.items
    if any(i.nodeid.startswith(prefix) and i.get_closest_marker("integration") for i in items):
        request.getfixturevalue("key_service")


@pytest.fixture(scope="session")
async def key_service(kafka_bootstrap: str, database_url: str) -> AsyncIterator[str]:
    """Tests on Kafka and PostgreSQL seal personal data as production does: one key service
    for the session (its own process, on a free port), which every service a test starts
    reaches through CHORUS_KEY_STORES. Started only once a test on the infrastructure runs
    (a run of handler tests starts none); dev stacks started by a test run their own."""
    log_dir = Path(tempfile.mkdtemp(prefix="chorus-key-service-"))
    tls, api_port = key_service_tls(), free_port()
    proc = ServiceProcess(
        "key_service",
        {
            "CHORUS_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "CHORUS_DATABASE_URL": database_url,
            "CHORUS_API_PORT": str(api_port),
            **tls,
        },
        log_dir,
    )
    proc.start()
    await proc.wait_healthy()
    url = f"https://127.0.0.1:{api_port}"
    try:
        with reaching_key_service(url, tls[KEY_SERVICE_CA]):
            yield url
    finally:
        await proc.terminate()


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """Spans are built, into memory (as with an exporter: OTEL_TRACES_EXPORTER)."""
    found = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(found))
    monkeypatch.setattr(tracing, "_spans", OtelSpans(provider.get_tracer("test")))
    return found
