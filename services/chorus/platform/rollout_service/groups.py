"""Every service's consumer lag, read from Kafka every ``group_lag_interval_s``:
``chorus_consumer_group_lag{service_name, topic}``, records the service's consumer group
(named after it) has yet to read. A service exports its own lag only while it runs; this
one is there when none of its replicas is (an agent KEDA scaled to zero, a crashed one),
which is when its backlog matters most. Every replica reports it (the same numbers).
"""

from __future__ import annotations

from chorus.base.loops import forever
from chorus.kernel.kafka import kafka_auth
from chorus.kernel.service import RuntimeHandle
from chorus.platform.rollout_service.adapters.grouplag import group_lags
from chorus.runtime.runner import group_topics


# service_name, not service: a scrape sets the rollout service's own as the target's label.
async def report_group_lag(rt: RuntimeHandle) -> None:
    lag = rt.metrics.gauge(
        "chorus_consumer_group_lag",
        "Records each service's consumer group has yet to read, from Kafka (with or without members)",
        ["service_name", "topic"],
    )
    groups = {
        name: topics
        for name in rt.registry.principals.services
        if (topics := group_topics(rt.registry, name))
    }

    async def round_() -> None:
        found = await group_lags(rt.settings.kafka_bootstrap, kafka_auth(), groups)
        for service, topics in found.items():
            for topic, behind in topics.items():
                lag.labels(service, topic).set(behind)

    await forever("group-lag", round_, every_s=rt.settings.group_lag_interval_s, sleep=rt.clock.sleep)
