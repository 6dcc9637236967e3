"""The event contracts of Chorus: envelope and payload models, the single source of truth.

Importing this package registers every event model (``CATALOG``) and every
upcaster (``UPCASTERS``). JSON Schemas under ``schemas/events`` are generated
from these models.
"""

from __future__ import annotations

from chorus.contracts import approvals, lifecycle, platform, procurement, research, rollouts
from chorus.contracts.base import CATALOG, UPCASTERS, EventModel, Model, event, upcaster
from chorus.contracts.envelope import Envelope, Priority, ProducerRef

__all__ = [
    "CATALOG",
    "UPCASTERS",
    "Envelope",
    "EventModel",
    "Model",
    "Priority",
    "ProducerRef",
    "approvals",
    "event",
    "lifecycle",
    "platform",
    "procurement",
    "research",
    "rollouts",
    "upcaster",
]
