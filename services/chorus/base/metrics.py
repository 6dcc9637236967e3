"""The four numbers an operator watches, per service, in Prometheus form.

Queue depth (consumer lag per partition, outbox backlog), latency (handle
histogram), failures by category, and completion (workflows ended by outcome).
Each service process owns one registry so that several services can run in one
test process without clashing.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from chorus import __version__

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)


def process_registry(version: str = __version__) -> CollectorRegistry:
    """A registry of one process's own, with its CPU, memory, file descriptors and garbage
    collections (prometheus_client puts those only in its default registry), and what runs:
    ``version``, the service's own (a platform service's is Chorus's)."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    # The usual build-info series (1, the versions as labels: joined onto any series with
    # `* on (instance) group_left (version)`). Its release is the scrape target's label.
    Gauge(
        "chorus_build_info",
        "1, labelled with the versions of the service, of Chorus and of Python it runs",
        ["version", "chorus_version", "python_version"],
        registry=registry,
    ).labels(version, __version__, platform.python_version()).set(1)
    return registry


class Metrics:
    def __init__(self, service: str, version: str = __version__) -> None:
        self.registry = process_registry(version)
        self.service = service
        self.events_in = self.counter(
            "chorus_events_in", "Records read, by topic and event type", ["topic", "event_type"]
        )
        self.events_out = self.counter("chorus_events_out", "Events published by the outbox relay", ["topic"])
        self.handle_latency = Histogram(
            "chorus_handle_seconds",
            "Time from reading a record to committing its outcome",
            ["event_type"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.failures = self.counter(
            "chorus_failures", "Handler and decode failures by category", ["category", "event_type"]
        )
        self.dead_letters = self.counter(
            "chorus_dead_letters", "Records sent to the dead-letter topic", ["category"]
        )
        self.retries = self.counter("chorus_retries", "Durable retries scheduled", ["event_type"])
        self.duplicates = self.counter(
            "chorus_duplicates_skipped", "Deliveries skipped because the inbox had them"
        )
        self.dropped = self.counter(
            "chorus_events_dropped",
            "Events that arrived after their workflow ended: recorded in the inbox, not handled",
            ["event_type"],
        )
        self.not_mine = self.counter(
            "chorus_events_not_mine",
            "Events of workflows pinned to another release of this service: recorded, not handled",
            ["event_type"],
        )
        self.completions = self.counter(
            "chorus_workflows_ended", "Workflows this service ended, by outcome", ["workflow_type", "outcome"]
        )
        self.consumer_lag = self.gauge(
            "chorus_consumer_lag", "Records not yet consumed (queue depth)", ["topic", "partition"]
        )
        self.in_flight = self.gauge("chorus_in_flight", "Records being handled now")
        self.outbox_backlog = self.gauge(
            "chorus_outbox_backlog", "Outbox rows committed but not yet published"
        )
        self.outbox_refused = self.counter(
            "chorus_outbox_refused",
            "Outbox rows the broker cannot take (too large, invalid): set aside and dead-lettered "
            "(alert on any increase)",
            ["topic"],
        )
        self.records_stuck = self.gauge(
            "chorus_records_stuck",
            "Records retried for an infrastructure reason longer than the stuck-record budget "
            "(alert when above 0)",
        )
        self.stuck_alerts = self.counter(
            "chorus_stuck_record_alerts", "Times a record passed the stuck-record budget, by topic", ["topic"]
        )

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        """A counter in this process's registry: the runtime's, or one of a service's own."""
        return Counter(name, documentation, labels, registry=self.registry)

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        """A gauge in this process's registry: the runtime's, or one of a service's own."""
        return Gauge(name, documentation, labels, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
