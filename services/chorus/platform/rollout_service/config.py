"""Settings of the rollout service (CHORUS_* environment variables)."""

from __future__ import annotations

from pydantic import Field

from chorus.runtime.runner import ServiceSettings
from chorus.web.apikeys import ApiKeySettings


class Settings(ApiKeySettings, ServiceSettings):
    http_port: int = 8121
    judge_interval_s: float = Field(default=5.0, gt=0)
    """How often running canaries with an automatic-rollback rule are judged."""
    running_within_s: float = Field(default=120.0, gt=0)
    """A release that reported within this long is shown as running."""
    group_lag_interval_s: float = Field(default=15.0, gt=0)
    """How often every service's consumer lag is read from Kafka (chorus_consumer_group_lag)."""
    latency_window_s: float = Field(default=900.0, gt=0)
    """Step latency in the status is over the reports of this long."""
