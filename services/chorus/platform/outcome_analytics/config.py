"""Settings of outcome analytics (``CHORUS_*`` environment variables)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from chorus.web.apikeys import ApiKeySettings

SERVICE = "outcome_analytics"


class Settings(ApiKeySettings):
    model_config = SettingsConfigDict(env_prefix="CHORUS_", extra="ignore", frozen=True)

    http_host: str = "127.0.0.1"
    http_port: int = 8104
    group_id: str = SERVICE
    """Base name of the consumer group (also the faust app id).

    Every start appends a unique suffix and reads its topics from the beginning:
    the view lives in memory only, so a restart must rebuild it from the first
    record, and each replica must read every partition to answer for all of them
    (a shared group would split the partitions, and with them the view).
    """
    max_event_bytes: int = 1_048_576
    """Records larger than this are dead-lettered as decode errors."""
    dead_letter_retry_max_s: float = 30.0
    """Cap of the backoff between attempts to publish a dead letter (it is retried forever)."""
    signing_dir: str = ""
    """Directory of Ed25519 keys (chorus.privacy.signing) holding ``outcome_analytics.key``:
    its dead letters are signed like every runtime service's, so nobody else can post one
    in its name (a redrive would publish the letter's record onto the topics it reads)."""
