"""A service as it runs: the kernel with every feature package plugged in.

This is the only module that knows them all: the kernel (``chorus.kernel.runner``) runs
the record path, and the features add what a platform service needs — releases side by
side (``chorus.releases``), signatures, sealing and data requests (``chorus.privacy``),
circuit breakers (``chorus.outside``), the HTTP server (``chorus.web``) and span export
(``chorus.observability``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
from pydantic_settings import SettingsConfigDict

from chorus.base.clock import Clock, clock_from_setting
from chorus.base.errors import ConfigError
from chorus.base.loops import run_main
from chorus.base.settings import EX_CONFIG, KernelSettings
from chorus.contracts.base import EventModel
from chorus.contracts.registry import RUNTIME_PRODUCER, Registry, load_registry
from chorus.kernel.recordpath import KERNEL_CONTROLS
from chorus.kernel.runner import KernelRunner, Ports
from chorus.kernel.service import RuntimeHandle, ServiceSpec
from chorus.kernel.steps.route import ControlHandler
from chorus.observability.logs import setup_logging
from chorus.observability.tracing import setup_tracing
from chorus.outside.feature import Breakers
from chorus.privacy.crypto import Sealer
from chorus.privacy.feature import (
    LOCAL_REGION,
    Privacy,
    PrivacySettings,
    key_service_credential,
    service_keys,
    start_sealer,
)
from chorus.releases.feature import Releases, ReleaseSettings, release_identity
from chorus.releases.rollouts import RolloutView
from chorus.resets.feature import Resets
from chorus.web.http import HttpServer, WebSettings

log = logging.getLogger("chorus.runner")


RUNTIME_CONTROLS: Mapping[type[EventModel], type[ControlHandler]] = {
    **KERNEL_CONTROLS,
    **Privacy.CONTROLS,
    **Releases.CONTROLS,
    **Resets.CONTROLS,
}
"""The control messages every service's runtime answers (chorus.control, chorus.data), and
the code that answers each."""


def group_topics(registry: Registry, service: str) -> list[str]:
    """The physical topics the consumer group of ``service`` reads: the topics naming it a
    consumer, and a runtime service's control topics."""
    spec = registry.principals.services.get(service)
    if spec is None:
        return []
    names = {t.topic for t in registry.topics.values() if service in t.consumers}
    if spec.kind == "runtime":
        for event_type in (m.event_type for m in RUNTIME_CONTROLS):
            names.add(registry.topic_for(event_type).topic)
    return sorted(p for name in names for p in registry.topics[name].physical_topics())


class ServiceSettings(KernelSettings, ReleaseSettings, PrivacySettings, WebSettings):
    """Settings every service has; a service's config.py subclasses this."""

    model_config = SettingsConfigDict(env_prefix="CHORUS_", extra="ignore", frozen=True)


class ServiceRunner(KernelRunner):
    settings: ServiceSettings

    def __init__(
        self,
        spec: ServiceSpec[Any, Any],
        settings: ServiceSettings,
        *,
        deps: Any = None,
        clock: Clock | None = None,
        registry: Registry | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        registry = registry or load_registry(Path(settings.schemas_dir) if settings.schemas_dir else None)
        super().__init__(
            spec,
            settings,
            registry=registry,
            clock=clock or clock_from_setting(settings.clock),
            identity=release_identity(spec, settings.release, settings.group_id),
            deps=deps,
        )
        self.release = settings.release or spec.version
        self.keys = service_keys(spec, registry, settings.signing_dir)
        self.sealer = sealer
        self.key_credential = key_service_credential(settings, registry, spec.name)
        self.releases = Releases(settings, settings.group_id or spec.name, self.keys.verifier)
        self.privacy: Privacy | None = None
        self.http: HttpServer | None = None

    @property
    def rollouts(self) -> RolloutView:
        return self.releases.view

    async def start(self, ports: Ports | None = None) -> None:
        s = self.settings
        setup_logging(self.spec.name, s.log_level, s.log_json)
        setup_tracing(self.spec.name, self.release)
        try:
            if self.sealer is None and self.key_credential is not None:
                self.sealer = await start_sealer(s, self.registry, self._stack, self.key_credential)
        except BaseException:
            await self._stack.aclose()
            raise
        self.privacy = Privacy(s, self.keys, self.sealer)
        await super().start(
            Ports(
                signer=self.keys.signer,
                sealer=self.sealer,
                features=[self.privacy, self.releases, Resets(), Breakers()],
                handle_extras={"rollouts": self.rollouts, "verifier": self.keys.verifier},
            )
        )

    def _main_release(self) -> bool:
        return not self.settings.release

    async def _serve(self, handle: RuntimeHandle) -> None:
        s = self.settings
        self.http = HttpServer(
            s.http_host,
            s.http_port,
            self.metrics,
            self.health,
            title=self.spec.name,
            api_keys=getattr(s, "api_keys", None),  # a service with an API has ApiKeySettings
        )
        if self.spec.http_routes is not None:
            self.http.include(self.spec.http_routes(handle))
        await self.http.start()

    async def _unserve(self) -> None:
        if self.http:
            await self.http.stop()

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        """Time-based retention now (it runs every ``purge_interval_s`` by itself)."""
        assert self.privacy is not None and self.privacy.retention is not None
        return await self.privacy.retention.purge(conn, now)

    async def run_until_signalled(self) -> int:
        """Run until SIGTERM/SIGINT (graceful) or a fatal error; returns the exit code."""
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_requested.set)
        await self.start()
        fatal_wait = asyncio.create_task(self.wait_fatal())
        stop_wait = asyncio.create_task(stop_requested.wait())
        await asyncio.wait({fatal_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        fatal_wait.cancel()
        stop_wait.cancel()
        await self.stop()
        return 3 if self.fatal else 0


@contextlib.asynccontextmanager
async def running(
    spec: ServiceSpec[Any, Any], settings: ServiceSettings, **kwargs: Any
) -> AsyncIterator[ServiceRunner]:
    """Run a service inside ``async with`` (tests, embedding)."""
    runner = ServiceRunner(spec, settings, **kwargs)
    await runner.start()
    try:
        yield runner
    finally:
        await runner.stop()


def main(spec: ServiceSpec[Any, Any], settings: ServiceSettings) -> None:
    """The body of every service's ``__main__``."""
    try:
        runner = ServiceRunner(spec, settings)
    except ConfigError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None
    code = run_main(runner.run_until_signalled())
    raise SystemExit(code)


__all__ = [
    "LOCAL_REGION",
    "RUNTIME_CONTROLS",
    "RUNTIME_PRODUCER",
    "ServiceRunner",
    "ServiceSettings",
    "main",
    "running",
]
