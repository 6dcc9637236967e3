"""How far behind each consumer group is, read from Kafka alone: its committed offsets
against the topics' ends. It needs no member of the group, so a service scaled to zero
(KEDA's minReplicaCount 0) still shows its backlog; KEDA's Kafka scaler reads the same two
numbers to wake it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from aiokafka.structs import TopicPartition

from chorus.kernel.kafka import KafkaAuth, make_admin, make_consumer, stop_client


async def group_lags(
    bootstrap: str, auth: KafkaAuth, groups: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, int]]:
    """group -> topic -> records its members have yet to read (summed over partitions), for
    each group (-> the topics it reads). A partition the group never committed counts from
    its first retained record: where a new member starts (auto_offset_reset earliest).
    Read as committed reads (read_committed): open transactions are not behind."""
    admin = make_admin(bootstrap, client_id="chorus-group-lag", auth=auth)
    ends = make_consumer(bootstrap, group_id=None, client_id="chorus-group-lag", auth=auth)
    await admin.start()
    try:
        await ends.start()
        # Listed first: describing a topic that does not exist could create it.
        existing = set(await admin.list_topics())
        topics = sorted({t for wanted in groups.values() for t in wanted} & existing)
        partitions = [
            TopicPartition(entry["topic"], p["partition"])
            for entry in (await admin.describe_topics(topics) if topics else [])
            if entry["error_code"] == 0
            for p in entry["partitions"]
        ]
        latest = await ends.end_offsets(partitions) if partitions else {}
        earliest = await ends.beginning_offsets(partitions) if partitions else {}
        lags: dict[str, dict[str, int]] = {}
        for group, wanted in groups.items():
            committed = await admin.list_consumer_group_offsets(group)
            behind: dict[str, int] = defaultdict(int)
            reads = set(wanted)
            for tp in (tp for tp in partitions if tp.topic in reads):
                at = committed[tp].offset if tp in committed and committed[tp].offset >= 0 else earliest[tp]
                behind[tp.topic] += max(0, latest[tp] - at)
            lags[group] = {topic: behind[topic] for topic in wanted if topic in existing}
        return lags
    finally:
        await stop_client(ends)
        await admin.close()
