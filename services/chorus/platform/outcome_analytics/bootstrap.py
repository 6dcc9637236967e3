"""Wiring: what the outcome view's handler gets (the view, its metrics, the dead-letter
publisher) for one replica, whose consumer group is its own (the view is rebuilt from the
topics' start by every replica)."""

from __future__ import annotations

import uuid

from chorus import __version__
from chorus.base.clock import clock_from_setting
from chorus.base.metrics import Metrics
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.platform import EventDeadLettered
from chorus.contracts.registry import Registry
from chorus.platform.outcome_analytics.adapters.deadletters import KafkaDeadLetters
from chorus.platform.outcome_analytics.adapters.metrics import ViewCollector
from chorus.platform.outcome_analytics.config import SERVICE, Settings
from chorus.platform.outcome_analytics.domain import OutcomeView
from chorus.platform.outcome_analytics.handlers import Deps
from chorus.privacy.signing import Signer, Verifier, load_keys


def unique_group(base: str) -> str:
    """Every replica its own group: each rebuilds the whole view from the topics' start."""
    return f"{base}.{uuid.uuid4().hex[:12]}"


def analytics_keys(settings: Settings, registry: Registry) -> tuple[Signer, Verifier]:
    """Its signer of dead letters (principals.yaml: it signs event.dead_lettered, as every
    runtime service does its own) and the verifier of what it counts, as every consumer
    checks it; SigningConfigError naming what is missing."""
    keys = load_keys(
        settings.signing_dir,
        SERVICE,
        signs={EventDeadLettered.event_type},
        checks=registry.signed_by(),
        endings=registry.endings(),
        own_commands=registry.own_commands(),
    )
    assert keys.signer is not None  # load_keys makes one when it signs anything
    return keys.signer, keys.verifier


def bootstrap(settings: Settings, registry: Registry) -> tuple[Deps, KafkaDeadLetters]:
    """The handler's dependencies, and the dead-letter publisher the process starts and stops."""
    view = OutcomeView()
    metrics = Metrics(SERVICE)
    metrics.registry.register(ViewCollector(view))
    signer, verifier = analytics_keys(settings, registry)
    dead_letters = KafkaDeadLetters(
        settings.kafka_bootstrap,
        registry.physical_topic(EventDeadLettered.event_type),
        signer,
        retry_max_s=settings.dead_letter_retry_max_s,
    )
    deps = Deps(
        registry=registry,
        verifier=verifier,
        view=view,
        dead_letters=dead_letters,
        metrics=metrics,
        clock=clock_from_setting(settings.clock),
        producer=ProducerRef(service=SERVICE, version=__version__),
        consumer_group=unique_group(settings.group_id),
        max_event_bytes=settings.max_event_bytes,
    )
    return deps, dead_letters
