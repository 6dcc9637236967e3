"""Wiring: what the intake's handler gets (its fact and dead-letter senders, metrics,
keys) for one replica of the shared consumer group."""

from __future__ import annotations

from chorus import __version__
from chorus.base.clock import clock_from_setting
from chorus.base.metrics import Metrics
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.platform import EventDeadLettered
from chorus.contracts.registry import Registry
from chorus.platform.outcome_analytics.adapters.deadletters import KafkaDeadLetters
from chorus.platform.outcome_analytics.adapters.facts import KafkaFacts
from chorus.platform.outcome_analytics.adapters.producer import DurableProducer
from chorus.platform.outcome_analytics.config import SERVICE, Settings
from chorus.platform.outcome_analytics.handlers import Deps
from chorus.privacy.signing import Signer, Verifier, load_keys


def facts_topic(settings: Settings) -> str:
    """Its own topic of facts, keyed by workflow (created by the app, like its changelogs)."""
    return f"{settings.group_id}-facts"


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


def bootstrap(settings: Settings, registry: Registry) -> tuple[Deps, DurableProducer]:
    """The intake's dependencies, and the producer the process starts and stops."""
    signer, verifier = analytics_keys(settings, registry)
    producer = DurableProducer(
        settings.kafka_bootstrap, client_id=f"{SERVICE}-intake", retry_max_s=settings.dead_letter_retry_max_s
    )
    deps = Deps(
        registry=registry,
        verifier=verifier,
        facts=KafkaFacts(producer, facts_topic(settings)),
        dead_letters=KafkaDeadLetters(
            producer, registry.physical_topic(EventDeadLettered.event_type), signer
        ),
        metrics=Metrics(SERVICE),
        clock=clock_from_setting(settings.clock),
        producer=ProducerRef(service=SERVICE, version=__version__),
        consumer_group=settings.group_id,
        max_event_bytes=settings.max_event_bytes,
    )
    return deps, producer
