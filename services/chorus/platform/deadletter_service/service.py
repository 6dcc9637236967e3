"""The dead-letter service's declaration: what it consumes, and what runs beside the consumer."""

from __future__ import annotations

from typing import Any

from chorus import __version__
from chorus.contracts.platform import EventDeadLettered, RedriveRequested
from chorus.kernel.service import On, ServiceSpec
from chorus.platform.deadletter_service.adapters.repository import LetterRetention, migrate
from chorus.platform.deadletter_service.api import routes
from chorus.platform.deadletter_service.bootstrap import bootstrap
from chorus.platform.deadletter_service.handlers import on_event_dead_lettered, on_redrive_requested
from chorus.platform.deadletter_service.metrics import export_gauges
from chorus.platform.deadletter_service.operations import redrive_requested

VERSION = __version__  # the release of Chorus it ships in

# No per-workflow state: letters are rows of its own tables, written as effects.
SPEC: ServiceSpec[Any, None] = ServiceSpec(
    name="deadletter_service",
    version=VERSION,
    # It stores the original record (personal data, sealed in the letter): opened here, it
    # is the record's own bytes, whose personal fields are sealed as their event carried them.
    handlers=[
        On(EventDeadLettered, on_event_dead_lettered, timeout_s=30, personal=True),
        On(RedriveRequested, on_redrive_requested, timeout_s=30),
    ],
    # Handlers emit nothing; an operator's discard publishes event.discarded through
    # the outbox. Redriven records are whatever the failing service consumed, with
    # that record's original producer, so they are no edge of this service.
    produces=frozenset({"event.discarded"}),
    migrations=[migrate],
    owned_data=[LetterRetention()],
    bootstrap=bootstrap,
    workers=[export_gauges, redrive_requested],
    http_routes=routes,
)
