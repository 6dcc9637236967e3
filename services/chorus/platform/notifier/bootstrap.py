"""Wiring: the notifier's channels (an SMTP client per send, one HTTP client) and its
directory (who reviews for which tier, who submits, from configuration)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx

from chorus.platform.notifier.adapters.channels import Channels
from chorus.platform.notifier.config import Settings, Submitter


@dataclass(frozen=True)
class Deps:
    channels: Channels
    reviewers: Mapping[str, str]
    """principal -> tier, of the reviewers with an e-mail address."""
    tier_webhooks: Mapping[str, str]
    submitters: Mapping[str, Submitter] = field(default_factory=dict)
    """principal -> how the person who submitted a workflow hears of it."""


@asynccontextmanager
async def bootstrap(settings: Settings) -> AsyncIterator[Deps]:
    async with httpx.AsyncClient() as http:
        yield Deps(
            channels=Channels(settings, http),
            reviewers={p: r.tier for p, r in settings.reviewers.items() if r.email},
            tier_webhooks=dict(settings.tier_webhooks),
            submitters=dict(settings.submitters),
        )
