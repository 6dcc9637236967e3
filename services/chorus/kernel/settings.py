"""Settings shared by every Chorus process.

Each service subclasses :class:`ChorusSettings` once (its ``config.py``); values come
from ``CHORUS_*`` environment variables and default to the local stack that
``deploy/local`` starts. Those defaults include published demo secrets (the database
password, the gateway's API keys, …): a process runs with them only in demo mode
(``CHORUS_ENV=demo``, which `make demo`, `make services` and the tests set) and refuses
to start with them anywhere else.
"""

from __future__ import annotations

import sys
from typing import Literal, Self, TypeVar
from urllib.parse import urlsplit

from pydantic import ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from chorus.kernel.kafka import kafka_auth
from chorus.outside.egress import egress_policy

LOCAL_KAFKA = "127.0.0.1:9092"
LOCAL_DATABASE_URL = "postgresql://chorus:chorus@127.0.0.1:54329/chorus"
DEMO_DATABASE_PASSWORD = "chorus"
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
    # Directory of the event registry (topics, schemas, examples).
    schemas_dir: str = ""
    # "system", or "offset-file:<path>" for a simulated clock shared by processes.
    clock: str = "system"
    log_level: str = "INFO"
    log_json: bool = True

    def demo_secrets(self) -> list[str]:
        """The settings that still hold a published demo secret, by environment variable.
        A service with secrets of its own extends this list."""
        if urlsplit(self.database_url).password == DEMO_DATABASE_PASSWORD:
            return ["CHORUS_DATABASE_URL (its password is the demo's)"]
        return []

    @model_validator(mode="after")
    def _no_demo_secrets_outside_demo(self) -> Self:
        found = self.demo_secrets() if self.env != "demo" else []
        if found:
            raise ValueError(
                f"demo secrets outside demo mode: {'; '.join(found)}. Set real values, "
                "or CHORUS_ENV=demo for a local demo"
            )
        return self


S = TypeVar("S", bound=ChorusSettings)


def load_settings(cls: type[S], *, kafka: bool = True) -> S:
    """A process's settings from its environment, with its Kafka login checked too (unless
    it has none: ``kafka=False``): a one-line refusal on stderr and exit 78 when they are
    incomplete or unsafe, before anything connects."""
    try:
        settings = cls()
        if kafka:
            kafka_auth()
        egress_policy()  # a malformed CHORUS_EGRESS_ALLOW stops the start, not the first call
    except ValidationError as exc:
        problems = "; ".join(
            f"{_where(e['loc'])}{e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        )
        print(f"refusing to start: {problems}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None
    except ValueError as exc:
        print(f"refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None
    return settings


def _where(loc: tuple[int | str, ...]) -> str:
    """The setting an error is about (a field of the settings; none for a whole-model check)."""
    return f"{'.'.join(str(p) for p in loc)}: " if loc else ""
