"""The app's own topics: two repartition topics and two table changelogs, created before start.

faust names them after the app id (``<id>-<name>``; a table's changelog is
``<id>-<table>-changelog``), and the app id is the consumer group: ``CHORUS_GROUP_ID``
``.g<CHORUS_VIEW_GENERATION>``. Every name starts with the service's principal, so the
prefixed ACLs ``chorus access`` grants it (``<service>*``: read, write, describe,
create) cover them and nothing of anyone else's.

They are created here, by the service, rather than by ``chorus topics apply``: their
names follow a setting (a new generation is a rebuild) and their partition count
follows the inputs'. faust's own declaring stays off (``topic_allow_declare=False``):
it would also try to create the input topics, which the registry owns, with its own
partition counts. A cluster whose operators create topics themselves can create these
four beforehand (``/health`` and the log name them); the service then only checks them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code

from chorus.base.errors import ConfigError
from chorus.base.logs import fields
from chorus.contracts.registry import Registry
from chorus.kernel.kafka import make_admin
from chorus.platform.outcome_analytics.config import Settings

log = logging.getLogger(__name__)

MAX_REPLICATION_FACTOR = 3


@dataclass(frozen=True)
class InternalTopics:
    app_id: str
    partitions: int
    """As many as the input topic with the most: as many replicas can share the work."""
    retention_ms: int
    """The repartition topics keep what the inputs keep: a replica down for that long
    still finds every fact it has not read yet."""
    workflows_table: str = "workflows"
    hours_table: str = "hours"
    by_workflow: str = field(init=False)
    by_type: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_workflow", f"{self.app_id}-by_workflow")
        object.__setattr__(self, "by_type", f"{self.app_id}-by_type")

    @classmethod
    def of(cls, settings: Settings, registry: Registry, inputs: list[str]) -> InternalTopics:
        specs = [registry.topic_of_physical(name) for name in inputs]
        return cls(
            app_id=settings.app_id,
            partitions=max(spec.partitions for spec in specs if spec is not None),
            retention_ms=max(spec.retention_ms for spec in specs if spec is not None),
        )

    def wanted(self) -> dict[str, dict[str, str]]:
        """Name -> configs, of every topic the app reads or writes besides its inputs."""
        deleting = {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms)}
        # A changelog keeps the last value of every key for as long as the view lives.
        compacted = {"cleanup.policy": "compact"}
        return {
            self.by_workflow: deleting,
            self.by_type: deleting,
            f"{self.app_id}-{self.workflows_table}-changelog": compacted,
            f"{self.app_id}-{self.hours_table}-changelog": compacted,
        }


def ensure_internal_topics(bootstrap: str, topics: InternalTopics) -> None:
    """Create whichever of ``topics`` is missing; ConfigError when one exists with another
    partition count (its keys would land elsewhere: that needs a new generation)."""
    loop = asyncio.new_event_loop()  # not the worker's: faust makes its own
    try:
        loop.run_until_complete(_ensure(bootstrap, topics))
    finally:
        loop.close()


async def _ensure(bootstrap: str, topics: InternalTopics) -> None:
    admin = make_admin(bootstrap, client_id="outcome_analytics-topics")
    await admin.start()
    try:
        wanted = topics.wanted()
        # Listing first: a metadata request naming a missing topic may auto-create it on
        # brokers that allow it, with the broker's defaults (delete, not compact).
        present = [name for name in wanted if name in set(await admin.list_topics())]
        described = await admin.describe_topics(present) if present else []
        have = {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}
        wrong = {name: count for name, count in have.items() if count != topics.partitions}
        if wrong:
            raise ConfigError(
                f"internal topics {wrong} do not have {topics.partitions} partitions (the inputs' most):"
                " rebuild the view under a new CHORUS_VIEW_GENERATION"
            )
        missing = [name for name in wanted if name not in have]
        if not missing:
            return
        brokers = len((await admin.describe_cluster())["brokers"])
        factor = min(MAX_REPLICATION_FACTOR, brokers)
        response = await admin.create_topics(
            [NewTopic(name, topics.partitions, factor, topic_configs=wanted[name]) for name in missing]
        )
        for error in response.to_object()["topic_errors"]:
            code = error["error_code"]
            # Another replica starting at the same time won the race: the topic exists.
            if code not in (0, TopicAlreadyExistsError.errno):
                raise ConfigError(
                    f"cannot create {error['topic']}: {for_code(code).__name__}"
                    f" {error['error_message'] or ''}: may its principal CREATE topics on its prefix?"
                )
        log.info("internal topics created", extra=fields(topics=missing, partitions=topics.partitions))
    finally:
        await admin.close()
