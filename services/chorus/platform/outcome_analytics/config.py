"""Settings of outcome analytics (``CHORUS_*`` environment variables)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from chorus.web.apikeys import ApiKeySettings

SERVICE = "outcome_analytics"


class Settings(ApiKeySettings):
    model_config = SettingsConfigDict(env_prefix="CHORUS_", extra="ignore", frozen=True)

    http_host: str = "127.0.0.1"
    http_port: int = 8104
    group_id: str = SERVICE
    """The consumer group every replica joins, and the faust app id: its own topics are
    named ``<group_id>-facts`` and ``<group_id>-<table>-changelog``. A new id rebuilds the
    view from the inputs' start (the old group's topics are left behind)."""
    partitions: int = Field(default=6, ge=1, le=1000)
    """Partitions of its own topics: the most replicas that share the work."""
    standby_replicas: int = Field(default=0, ge=0)
    """Copies each replica keeps of the partitions it does not own. Replicas minus one
    lets every replica answer for the whole view (the chart sets it so)."""
    replication_factor: int = Field(default=1, ge=1)
    """Replication of its own topics (the broker's default min.insync.replicas applies)."""
    max_event_bytes: int = 1_048_576
    """Records larger than this are dead-lettered as decode errors."""
    dead_letter_retry_max_s: float = 30.0
    """Cap of the backoff between attempts to publish a dead letter (it is retried forever)."""
    signing_dir: str = ""
    """Directory of Ed25519 keys (chorus.privacy.signing) holding ``outcome_analytics.key``:
    its dead letters are signed like every runtime service's, so nobody else can post one
    in its name (a redrive would publish the letter's record onto the topics it reads)."""
