"""Settings shared by every Chorus process.

Each service subclasses :class:`ChorusSettings` once (its ``config.py``); values come
from ``CHORUS_*`` environment variables and default to the local stack that
``deploy/local`` starts. Those defaults include published demo secrets (the database
password, the gateway's API keys, …): a process runs with them only in demo mode
(``CHORUS_ENV=demo``, which `make demo`, `make services` and the tests set) and refuses
to start with them anywhere else.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from typing_extensions import Self

LOCAL_KAFKA = "127.0.0.1:9092"
LOCAL_DATABASE_URL = "postgresql://chorus:chorus@127.0.0.1:54329/chorus"
DEMO_DATABASE_PASSWORD = "chorus"
DEMO_KEY_SERVICE_CLIENT = "demo-keys-{service}"
"""The credential a service presents to the key service in the demo (its name filled in):
each service its own, as in production, so the key service knows who asks."""


def demo_key_service_credential(service: str) -> str:
    return DEMO_KEY_SERVICE_CLIENT.format(service=service)


def is_demo_key_service_credential(credential: str) -> bool:
    return credential.startswith(DEMO_KEY_SERVICE_CLIENT.split("{", 1)[0])


EX_CONFIG = 78
"""sysexits' EX_CONFIG: the process refused its configuration."""


class ChorusSettings(BaseSettings):
    # hide_input_in_errors: a refusal must not print the secrets it refuses.
    model_config = SettingsConfigDict(
        env_prefix="CHORUS_", extra="ignore", frozen=True, hide_input_in_errors=True
    )

    env: Literal["demo", "production"] = "production"
    """CHORUS_ENV. ``demo`` accepts the published demo secrets (the local stack, tests);
    ``production`` (the default) refuses to start while any is still set."""
    kafka_bootstrap: str = LOCAL_KAFKA
    database_url: str = LOCAL_DATABASE_URL
    database_pool_mode: Literal["session", "transaction"] = "session"
    """``transaction`` when CHORUS_DATABASE_URL is a PgBouncer in transaction mode: no named
    prepared statements, and the session lock of the outbox relay's leader goes to
    CHORUS_DATABASE_DIRECT_URL (PostgreSQL itself), which that mode then needs."""
    database_direct_url: str = ""
    # Directory of the event registry (topics, schemas, examples).
    schemas_dir: str = ""
    # "system", or "offset-file:<path>" for a simulated clock shared by processes.
    clock: str = "system"
    log_level: str = "INFO"
    log_json: bool = True

    def demo_secrets(self) -> list[str]:
        """The settings that still hold a published demo secret, by environment variable.
        A service with secrets of its own extends this list."""
        urls = {
            "CHORUS_DATABASE_URL": self.database_url,
            "CHORUS_DATABASE_DIRECT_URL": self.database_direct_url,
        }
        return [
            f"{name} (its password is the demo's)"
            for name, url in urls.items()
            if urlsplit(url).password == DEMO_DATABASE_PASSWORD
        ]

    @model_validator(mode="after")
    def _no_demo_secrets_outside_demo(self) -> Self:
        if self.database_pool_mode == "transaction" and not self.database_direct_url:
            raise ValueError("CHORUS_DATABASE_POOL_MODE=transaction needs CHORUS_DATABASE_DIRECT_URL")
        found = self.demo_secrets() if self.env != "demo" else []
        if found:
            raise ValueError(
                f"demo secrets outside demo mode: {'; '.join(found)}. Set real values, "
                "or CHORUS_ENV=demo for a local demo"
            )
        return self


class KernelSettings(ChorusSettings):
    """What the kernel of every service reads (``CHORUS_*``); the feature packages add theirs
    and ``chorus.runtime.runner.ServiceSettings`` is all of them."""

    group_id: str = ""
    """The service's consumer group; defaults to the service name."""

    @model_validator(mode="after")
    def _static_members_are_named(self) -> Self:
        if self.static_membership and not self.instance:
            raise ValueError("CHORUS_STATIC_MEMBERSHIP needs CHORUS_INSTANCE (stable and unique per replica)")
        return self

    instance: str = ""
    static_membership: bool = False
    """Kafka static membership as ``<service>-<CHORUS_INSTANCE>`` (stable, unique per replica):
    one back within CHORUS_SESSION_TIMEOUT_MS rebalances no one; a stopped one holds its
    partitions until then."""
    concurrency: int = 32
    max_buffered_per_partition: int = 200
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 2_000
    commit_interval_s: float = 0.5
    shutdown_grace_s: float = 20.0
    max_event_bytes: int = 1_048_576
    dead_letter_guard_consecutive: int = 25
    db_pool_size: int = 10
    outbox_keep_s: float = 3600.0
    """Published outbox rows are kept this long (for inspection), then deleted."""
    stuck_record_alert_s: float = 180.0
    """A record failing for an infrastructure reason this long is reported stuck (/health,
    chorus status, chorus_records_stuck) while it goes on being retried."""
