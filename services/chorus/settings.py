"""Settings shared by every Chorus process.

Each service subclasses :class:`ChorusSettings` once (its ``config.py``); values come
from ``CHORUS_*`` environment variables and default to the local stack that
``deploy/local`` starts, so a service runs on a developer machine with no
configuration at all.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

LOCAL_KAFKA = "127.0.0.1:9092"
LOCAL_DATABASE_URL = "postgresql://chorus:chorus@127.0.0.1:54329/chorus"


class ChorusSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHORUS_", extra="ignore", frozen=True)

    kafka_bootstrap: str = LOCAL_KAFKA
    database_url: str = LOCAL_DATABASE_URL
    # Directory of the event registry (topics, schemas, examples).
    schemas_dir: str = ""
    # "system", or "offset-file:<path>" for a simulated clock shared by processes.
    clock: str = "system"
    log_level: str = "INFO"
    log_json: bool = True
