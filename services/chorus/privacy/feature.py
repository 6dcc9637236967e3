"""Privacy plugged into a service: its signing keys and sealer (the kernel's ports), the
verify step, the erasure and retirement requests it answers, and time-based retention."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar
from urllib.parse import urlsplit

import asyncpg
import httpx
from pydantic import field_validator

from chorus.base.errors import ConfigError, SigningConfigError
from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.base.settings import ChorusSettings, demo_key_service_credential, is_demo_key_service_credential
from chorus.contracts.base import EventModel
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.platform import SubjectErasureRequested, WorkflowsRetired
from chorus.contracts.registry import Registry
from chorus.kernel.recordpath import Plugs
from chorus.kernel.runner import Parts
from chorus.kernel.service import ServiceSpec
from chorus.kernel.steps.route import ControlHandler
from chorus.kernel.store.postgres import ServiceStore
from chorus.privacy.crypto import HttpKeyStore, Sealer
from chorus.privacy.datarequests import DataRequests, Erasure, Retirement
from chorus.privacy.signing import Keys, load_keys
from chorus.privacy.store import DataStore
from chorus.privacy.verify import Verify

log = logging.getLogger("chorus.privacy")

LOCAL_REGION = "local"
LOCAL_KEY_SERVICE = "https://127.0.0.1:8127"
KEY_SERVICE_TLS = ("CHORUS_KEY_SERVICE_TLS_CERT_FILE", "CHORUS_KEY_SERVICE_TLS_KEY_FILE")
"""The key service's certificate and private key (PEM files): its API is served over TLS only."""
KEY_SERVICE_CA = "CHORUS_KEY_SERVICE_CA_FILE"
"""The certificate authority its callers verify it with."""
DEMO_SUBJECT_KEY = "demo-subject-key-not-for-production"


class PrivacySettings(ChorusSettings):
    signing_dir: str = ""
    """Directory of Ed25519 keys (chorus.privacy.signing): every signer's ``<service>.pub``, and
    this service's ``<service>.key`` when it produces a signed (decision) event type."""
    key_stores: dict[str, str] = {LOCAL_REGION: LOCAL_KEY_SERVICE}
    """CHORUS_KEY_STORES: region -> URL of that region's key service (https: its API). This
    service seals and opens personal data of these regions only (residency,
    chorus.privacy.crypto)."""
    key_service_ca_file: str = ""
    """CHORUS_KEY_SERVICE_CA_FILE: the certificate authority (PEM) the key services'
    certificates are verified with; unset, the system's."""
    data_region: str = LOCAL_REGION
    """Where keys of new subjects are made, unless ``data_regions`` names their workflow type."""
    data_regions: dict[str, str] = {}
    """CHORUS_DATA_REGIONS: workflow type -> region (the same map on every service)."""
    key_service_api_key: str = ""
    """What this service presents to the key services: its own credential, which their
    CHORUS_KEY_SERVICE_CLIENTS maps to this service. Unset, in the demo: the demo's for this
    service. A service that reads and writes no personal field needs none (it gets no keys)."""
    key_cache_s: float = 60.0
    """How long a data key stays cached. The replica that reads an erasure request forgets
    its keys at once; the service's other replicas within this time."""
    subject_key: str = DEMO_SUBJECT_KEY
    """CHORUS_SUBJECT_KEY: the secret under which subject references are keyed (HMAC), where
    they enter (a submission) and where an operator names one (erasure, access log)."""
    archive_keep_s: float = 365 * 86400.0
    """Rows a retirement archived (``<service>.archive``) are kept this long, then deleted."""
    purge_interval_s: float = 3600.0
    """How often time-based retention runs (the archive, ServiceSpec.owned_data's purge)."""

    @field_validator("key_stores")
    @classmethod
    def _over_tls(cls, stores: dict[str, str]) -> dict[str, str]:
        plain = sorted(region for region, url in stores.items() if urlsplit(url).scheme != "https")
        if plain:
            raise ValueError(
                f"CHORUS_KEY_STORES: the key service of {', '.join(plain)} is not an https:// URL "
                "(data keys travel over TLS only)"
            )
        return stores

    @field_validator("key_service_ca_file")
    @classmethod
    def _readable_authority(cls, ca_file: str) -> str:
        try:
            key_service_trust(ca_file)  # at start, a one-line refusal; not at the first seal
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return ca_file

    def demo_secrets(self) -> list[str]:
        found = super().demo_secrets()
        if is_demo_key_service_credential(self.key_service_api_key):
            found.append("CHORUS_KEY_SERVICE_API_KEY (a demo credential)")
        if self.subject_key == DEMO_SUBJECT_KEY:
            found.append("CHORUS_SUBJECT_KEY (the demo's)")
        return found


def unstated_types(spec: ServiceSpec[Any, Any], registry: Registry) -> list[str]:
    """The signed types ``spec`` produces that the registry does not let its service state."""
    return sorted(
        t for t in spec.produces if registry.signers_of(t) and spec.name not in registry.signers_of(t)
    )


def service_keys(spec: ServiceSpec[Any, Any], registry: Registry, signing_dir: str) -> Keys:
    """The service's signer (of the types the registry says it signs) and the verifier of
    every signed type; SigningConfigError when a key is missing, or when the service
    produces a signed type the registry does not let it state (the service does not start:
    else the first such event would fail in its outbox, mid-workflow)."""
    unstated = unstated_types(spec, registry)
    if unstated:
        who = "; ".join(f"{t} by {', '.join(sorted(registry.signers_of(t)))}" for t in unstated)
        raise SigningConfigError(
            f"{spec.name} produces signed types it may not state ({who}): a project's service "
            f"that states one lists it in principals.yaml, services.{spec.name}.signs"
        )
    # What its handlers produce, and the commands its runtime writes for it (timers).
    signs = {t for t, signers in registry.signed_by().items() if spec.name in signers}
    return load_keys(
        signing_dir,
        spec.name,
        signs=signs,
        checks=registry.signed_by(),
        endings=registry.endings(),
        own_commands=registry.own_commands(),
    )


def key_service_credential(settings: PrivacySettings, registry: Registry, service: str) -> str | None:
    """What ``service`` presents to the key services; None when the registry gives it no
    personal field to read or write: it asks for no key (the key service would refuse it),
    and what it relays (retries, dead letters) is its own topics' data, in clear there too.
    ConfigError when it needs one and none is set outside the demo."""
    if not registry.handles_personal(service):
        return None
    if settings.key_service_api_key:
        return settings.key_service_api_key
    if settings.env != "demo":
        raise ConfigError(
            f"{service} reads or writes personal fields, so it needs data keys: set "
            f"CHORUS_KEY_SERVICE_API_KEY to its own credential (the one the key service's "
            f"CHORUS_KEY_SERVICE_CLIENTS maps to {service})"
        )
    return demo_key_service_credential(service)


def key_service_trust(ca_file: str) -> ssl.SSLContext:
    """What the key services' certificates are verified with: ``ca_file`` (PEM;
    CHORUS_KEY_SERVICE_CA_FILE), or the system's authorities when it is empty. Hostnames are
    checked, as always."""
    try:
        return ssl.create_default_context(cafile=ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{KEY_SERVICE_CA}: cannot read the certificate authority {ca_file} ({exc})"
        ) from None


async def start_sealer(
    settings: PrivacySettings, registry: Registry, stack: AsyncExitStack, credential: str
) -> Sealer:
    """The sealer of personal data, with a client of each configured region's key service."""
    trust = key_service_trust(settings.key_service_ca_file)
    client = httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=3.0), verify=trust)
    stack.push_async_callback(client.aclose)
    stores = {
        region: HttpKeyStore(region, url, credential, client) for region, url in settings.key_stores.items()
    }
    return Sealer(
        registry,
        stores,
        region=settings.data_region,
        regions=settings.data_regions,
        ttl_s=settings.key_cache_s,
    )


@dataclass
class Privacy:
    CONTROLS: ClassVar[Mapping[type[EventModel], type[ControlHandler]]] = {
        SubjectErasureRequested: Erasure,
        WorkflowsRetired: Retirement,
    }

    settings: PrivacySettings
    keys: Keys
    sealer: Sealer | None
    retention: Retention | None = None

    async def plug(self, parts: Parts) -> Plugs:
        spec = parts.spec
        requests = DataRequests(
            via=parts.answering(),
            store=DataStore(spec.name),
            owned=spec.owned_data,
            compensates=spec.handler_for(WorkflowEnded.event_type) is not None,
        )
        self.retention = retention = Retention(self.settings, parts.sql, spec, parts.pool, parts.clock)
        return Plugs(
            verify=[Verify(self.keys.verifier, self.sealer, parts.letters)],
            controls={
                SubjectErasureRequested: Erasure(requests, self.sealer),
                WorkflowsRetired: Retirement(requests, parts.letters),
            },
            workers={"retention": retention.run},
        )


@dataclass
class Retention:
    """Time-based retention: archived rows past ``archive_keep_s`` and whatever the
    service's own tables outlive (docs/retention.md), every ``purge_interval_s``."""

    settings: PrivacySettings
    sql: ServiceStore
    spec: ServiceSpec[Any, Any]
    pool: asyncpg.Pool
    clock: Any

    async def run(self) -> None:
        async def purge_round() -> None:
            async with self.pool.acquire() as conn:
                await self.purge(conn, self.clock.now())

        await forever(
            "retention", purge_round, every_s=self.settings.purge_interval_s, sleep=self.clock.sleep
        )

    async def purge(self, conn: asyncpg.Connection, now: datetime) -> dict[str, int]:
        removed = {
            f"{self.sql.schema}.archive": await self.sql.purge_archive(
                conn, now - timedelta(seconds=self.settings.archive_keep_s)
            )
        }
        for owned in self.spec.owned_data:
            removed.update(await owned.purge(conn, now))
        removed = {table: n for table, n in removed.items() if n}
        if removed:
            log.info("retention: removed rows past their keep time", extra=fields(rows=removed))
        return removed
