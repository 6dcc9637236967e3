"""What a service's one test on real Kafka and PostgreSQL needs: topics of its own (an
isolated registry), settings that run the service on them in a consumer group of its own,
and the sandbox standing in for the outside world (payment provider, sources, language
model). tests/services/conftest.py makes fixtures of them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from chorus.contracts.envelope import Envelope
from chorus.contracts.registry import Registry
from chorus.reference.sandbox.app import SANDBOX, Sandbox, SandboxConfig, create_app
from chorus.runtime.runner import ServiceSettings
from chorus.teststack import read_events
from tests.support.kafka import publish

S = TypeVar("S", bound=ServiceSettings)


def in_process(kafka_bootstrap: str, database_url: str, **extra: Any) -> dict[str, Any]:
    """The settings every service a test runs needs: the local stack, plain log lines, and an
    HTTP server on a port the OS picks (the platform services' default ports would collide
    between two test workers each running one)."""
    base = {
        "kafka_bootstrap": kafka_bootstrap,
        "database_url": database_url,
        "log_json": False,
        "http_port": 0,
    }
    return {**base, **extra}


@dataclass(frozen=True)
class OnKafka:
    """One test's own topics on the shared broker, and the database every service uses."""

    registry: Registry
    bootstrap: str
    database_url: str
    unique: str

    def settings(self, settings: type[S], service: str, **overrides: Any) -> S:
        """``settings`` of ``service`` running on these topics in a consumer group of its own
        (named after the service and the test), its HTTP server on a free port."""
        values = in_process(self.bootstrap, self.database_url, group_id=f"{service}-{self.unique}")
        return settings(**{**values, **overrides})

    async def publish(self, *envelopes: Envelope) -> None:
        """Each envelope on its event type's topic (its workflow's lane), in order; decision
        events are signed by the producer they name (tests.support.kafka.publish)."""
        by_topic: dict[str, list[Envelope]] = defaultdict(list)
        for env in envelopes:
            by_topic[self.registry.physical_topic(env.event_type, env.priority)].append(env)
        for topic, values in by_topic.items():
            await publish(self.bootstrap, topic, values)

    async def read(
        self, event_type: str, workflow_id: str | None = None, *, count: int = 1, settle_s: float = 0.0
    ) -> list[Any]:
        """The ``event_type`` events (of ``workflow_id``, if given) on these topics once ``count``
        arrived, then ``settle_s`` longer to see one that should not come
        (chorus.teststack.read_events)."""
        return await read_events(
            self.registry, self.bootstrap, event_type, workflow_id=workflow_id, count=count, settle_s=settle_s
        )


@dataclass(frozen=True)
class Outside:
    """The sandbox, served on a free port: its URL, and what it was asked (its counters)."""

    url: str
    world: Sandbox


@asynccontextmanager
async def sandbox_served(config: SandboxConfig | None = None) -> AsyncIterator[Outside]:
    """The sandbox's app on a free port of this process while the block runs."""
    app = create_app(config or SandboxConfig())
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        host, port = runner.addresses[0][:2]
        yield Outside(f"http://{host}:{port}", app[SANDBOX])
    finally:
        await runner.cleanup()
