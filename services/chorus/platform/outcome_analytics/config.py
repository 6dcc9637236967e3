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
    """Base name of the consumer group, which is also the faust app id and the prefix of
    its internal topics: ``<group_id>.g<view_generation>``. Every replica joins it; the
    group splits the partitions between them and remembers how far they read."""
    view_generation: int = Field(default=1, ge=1)
    """Raise it to rebuild the view from the input topics (README, "Rebuild"): a new
    generation is a new group with no offsets and new, empty tables."""
    advertised_url: str = ""
    """The URL the other replicas reach this one at (``http://<pod IP>:<port>``); empty:
    ``http://<http_host>:<http_port>``. Spread to every replica through the group."""
    standby_replicas: int = Field(default=0, ge=0)
    """faust's ``table_standby_replicas``: copies of each partition's tables kept warm by
    other replicas for a faster fail-over, at the cost of that much more memory each."""
    commit_interval_s: float = Field(default=2.8, gt=0)
    """How often offsets are committed (faust's default); what a crash may read again."""
    peer_timeout_s: float = Field(default=5.0, gt=0)
    """How long a replica waits for another's part of an answer before answering 503."""
    max_event_bytes: int = 1_048_576
    """Records larger than this are dead-lettered as decode errors."""
    dead_letter_retry_max_s: float = 30.0
    """Cap of the backoff between attempts to publish a dead letter (it is retried forever)."""
    signing_dir: str = ""
    """Directory of Ed25519 keys (chorus.privacy.signing) holding ``outcome_analytics.key``:
    its dead letters are signed like every runtime service's, so nobody else can post one
    in its name (a redrive would publish the letter's record onto the topics it reads)."""

    @property
    def app_id(self) -> str:
        """The consumer group, faust app id and prefix of the internal topics."""
        return f"{self.group_id}.g{self.view_generation}"
