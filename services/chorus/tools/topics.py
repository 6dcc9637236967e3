"""Topic provisioning: make the broker's topics what ``schemas/topics/*.yaml`` says.

Every physical topic (the three priority lanes of a topic with ``lanes: true``)
gets the yaml's partitions, ``retention.ms`` and ``cleanup.policy``. Reconciling is
idempotent and only ever adds: a missing topic is created, partitions grow when the
yaml asks for more and never shrink (Kafka cannot remove partitions), configs that
differ are altered, and nothing is deleted.

A deployment grows past the registry's partitions and retention with an overlay
(:func:`read_overlay`): the ``topics:`` of a file that is also the Helm chart's values,
so the chart's partition ceilings and the broker's topics come from the same numbers.
The registry's values are the minimums an overlay may ask for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
    for_code,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chorus.contracts.registry import TopicSpec, platform_schemas_dir, read_project
from chorus.kernel.kafka import make_admin

EX_UNAVAILABLE = 69  # sysexits.h: a service the command needs is unavailable
MAX_DEFAULT_REPLICATION_FACTOR = 3
UNKNOWN_TOPIC_OR_PARTITION = 3
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source: set on the topic itself
MAKE_UP_HINT = "start the local broker with `make up`, or point CHORUS_KAFKA_BOOTSTRAP at a running one"


class BrokerUnavailableError(Exception):
    """No broker answered at the bootstrap address."""

    def __init__(self, bootstrap: str, cause: str) -> None:
        super().__init__(f"cannot reach Kafka at {bootstrap}: no broker answered ({cause}); {MAKE_UP_HINT}")
        self.bootstrap = bootstrap


class ProvisioningError(Exception):
    """Kafka refused a change."""


class UnsatisfiableError(ProvisioningError):
    """The request cannot be met by this cluster (more replicas than brokers)."""


@dataclass(frozen=True)
class WantedTopic:
    """A physical topic as the registry wants it."""

    name: str
    declared_in: str  # the topic yaml's ``topic`` (differs from name for the lanes)
    partitions: int
    configs: Mapping[str, str]


@dataclass(frozen=True)
class ActualTopic:
    """A topic as the broker has it: effective configs and those set on the topic."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]
    dynamic: Mapping[str, str]


Action = Literal["create", "add-partitions", "alter-configs", "keep-partitions", "note"]
CHANGING: frozenset[Action] = frozenset({"create", "add-partitions", "alter-configs"})
# How a change reads once done, and in a dry run.
LEAD_IN: dict[Action, tuple[str, str]] = {
    "create": ("created with ", "would be created with "),
    "add-partitions": ("", "would change "),
    "alter-configs": ("", "would change "),
}


@dataclass(frozen=True)
class Change:
    """One step of a plan; only ``create``, ``add-partitions`` and ``alter-configs`` act."""

    topic: str
    action: Action
    detail: str
    partitions: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)


def load_topic_specs(root: Path) -> list[TopicSpec]:
    """The topic yamls of a registry directory (with the platform's, for a project's registry).

    Validated as the registry validates them (a yaml's name must be its topic).
    Raises FileNotFoundError when there is no ``topics/`` folder, ValueError
    naming the file for an invalid one.
    """
    project = read_project(root)
    if project is not None and project.extends == "platform":
        # A project's registry extends the platform's: its topics are provisioned with them.
        return [*load_topic_specs(platform_schemas_dir()), *_topic_files(root)]
    return _topic_files(root)


def _topic_files(root: Path) -> list[TopicSpec]:
    folder = root / "topics"
    if not folder.is_dir():
        raise FileNotFoundError(f"no topics/ in {root} (set CHORUS_SCHEMAS_DIR or --schemas-dir)")
    specs: list[TopicSpec] = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            spec = TopicSpec.model_validate(yaml.safe_load(path.read_text()))
        except (ValidationError, yaml.YAMLError) as exc:
            raise ValueError(f"{path}: {exc}") from None
        if path.stem != spec.topic:
            raise ValueError(f"{path}: file name must be the topic name {spec.topic}.yaml")
        specs.append(spec)
    return specs


class TopicOverride(BaseModel):
    """A deployment's partitions and retention for one registry topic (all its lanes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    partitions: int | None = Field(default=None, ge=1)
    retention_ms: int | None = Field(default=None, ge=-1)


class DeploymentOverlay(BaseModel):
    # The file is a Helm values file as well: its other keys are the chart's.
    model_config = ConfigDict(extra="ignore")
    topics: dict[str, TopicOverride] = Field(default_factory=dict)


def read_overlay(path: Path | None) -> dict[str, TopicOverride]:
    """The ``topics:`` of a deployment overlay (none without a path). ValueError names the
    file and what is wrong in it; FileNotFoundError when there is no such file."""
    if path is None:
        return {}
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
        return DeploymentOverlay.model_validate(loaded).topics
    except (ValidationError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def overlaid(specs: Sequence[TopicSpec], overrides: Mapping[str, TopicOverride]) -> list[TopicSpec]:
    """``specs`` with a deployment's overrides. The registry's partitions and retention are
    minimums: its partitions are the parallelism its services were designed for (and Kafka
    cannot take partitions away), its retention the window replays and days-long waits
    rely on. ValueError names every override that is not a topic or is below them."""
    known = {spec.topic: spec for spec in specs}
    problems: list[str] = []
    for name, override in sorted(overrides.items()):
        spec = known.get(name)
        if spec is None:
            problems.append(f"topics.{name}: not a topic of the registry")
            continue
        if override.partitions is not None and override.partitions < spec.partitions:
            problems.append(
                f"topics.{name}.partitions {override.partitions}: below the registry's {spec.partitions}"
            )
        if override.retention_ms is not None and not _keeps_longer(override.retention_ms, spec.retention_ms):
            problems.append(
                f"topics.{name}.retention_ms {override.retention_ms}: shorter than the registry's"
                f" {spec.retention_ms}"
            )
    if problems:
        raise ValueError("; ".join(problems))
    return [
        spec.model_copy(update=overrides[spec.topic].model_dump(exclude_none=True))
        if spec.topic in overrides
        else spec
        for spec in specs
    ]


def _keeps_longer(retention_ms: int, minimum: int) -> bool:
    """-1 is forever."""
    return retention_ms == -1 or (minimum != -1 and retention_ms >= minimum)


def wanted_topics(specs: Iterable[TopicSpec]) -> list[WantedTopic]:
    """Every physical topic of the specs, with the configs the registry manages."""
    return [
        WantedTopic(
            name=physical,
            declared_in=spec.topic,
            partitions=spec.partitions,
            configs={
                "retention.ms": str(spec.retention_ms),
                "cleanup.policy": spec.cleanup_policy,
                **(
                    {"max.message.bytes": str(spec.max_message_bytes)}
                    if spec.max_message_bytes is not None
                    else {}
                ),
            },
        )
        for spec in specs
        for physical in spec.physical_topics()
    ]


def plan(
    wanted: Sequence[WantedTopic], actual: Mapping[str, ActualTopic], replication_factor: int
) -> list[Change]:
    """What to do to turn ``actual`` into ``wanted``. Pure; an empty CHANGING set means done."""
    changes: list[Change] = []
    for want in wanted:
        have = actual.get(want.name)
        if have is None:
            settings = ", ".join(f"{k}={v}" for k, v in want.configs.items())
            changes.append(
                Change(
                    want.name,
                    "create",
                    f"{want.partitions} partitions, replication factor {replication_factor}, {settings}",
                    partitions=want.partitions,
                    configs=want.configs,
                )
            )
            continue
        if have.partitions < want.partitions:
            changes.append(
                Change(
                    want.name,
                    "add-partitions",
                    f"partitions {have.partitions} -> {want.partitions} (keys map to new"
                    " partitions: order per key holds for records produced from now on)",
                    partitions=want.partitions,
                )
            )
        elif have.partitions > want.partitions:
            changes.append(
                Change(
                    want.name,
                    "keep-partitions",
                    f"has {have.partitions} partitions, the registry asks for {want.partitions};"
                    f" Kafka cannot remove partitions, so it keeps {have.partitions}",
                )
            )
        differing = {
            key: value
            for key, value in want.configs.items()
            if not _same_config(key, have.configs.get(key), value)
        }
        if differing:
            # AlterConfigs replaces every config set on the topic: carry the others over.
            merged = {**have.dynamic, **differing}
            detail = ", ".join(f"{k} {have.configs.get(k)} -> {v}" for k, v in differing.items())
            changes.append(Change(want.name, "alter-configs", detail, configs=merged))
        if have.replication_factor < replication_factor:
            changes.append(
                Change(
                    want.name,
                    "note",
                    f"replication factor {have.replication_factor}, {replication_factor} wanted;"
                    " not changed (raising it is a partition reassignment)",
                )
            )
    return changes


@dataclass
class ApplyResult:
    """What ``apply_topics`` found and did."""

    bootstrap: str
    brokers: int
    replication_factor: int
    topics: list[str]
    changes: list[Change]
    dry_run: bool

    @property
    def acted(self) -> list[Change]:
        return [c for c in self.changes if c.action in CHANGING]

    def lines(self) -> list[str]:
        lines = []
        for change in self.changes:
            done, planned = LEAD_IN.get(change.action, ("", ""))
            lead = planned if self.dry_run else done
            lines.append(f"{change.topic}: {lead}{change.detail}")
        counts = {
            action: sum(1 for c in self.acted if c.action == action)
            for action in ("create", "add-partitions", "alter-configs")
        }
        touched = len({c.topic for c in self.acted})
        if not self.acted:
            lines.append(
                f"nothing changed: the {len(self.topics)} topic(s) of the registry on"
                f" {self.bootstrap} already match it"
            )
        else:
            verb = "would change" if self.dry_run else "changed"
            lines.append(
                f"{verb} {touched} of {len(self.topics)} topic(s) on {self.bootstrap}:"
                f" {counts['create']} created, {counts['add-partitions']} with more partitions,"
                f" {counts['alter-configs']} with new configs"
            )
        return lines


async def apply_topics(
    bootstrap: str,
    specs: Sequence[TopicSpec],
    *,
    replication_factor: int | None = None,
    dry_run: bool = False,
) -> ApplyResult:
    """Create or reconcile every physical topic of ``specs`` on the cluster.

    Idempotent: a second run finds nothing to do. ``replication_factor`` defaults
    to min(3, number of brokers) and applies to created topics only. Raises
    BrokerUnavailableError when no broker answers, UnsatisfiableError when the
    replication factor exceeds the brokers, ProvisioningError when Kafka refuses.
    """
    wanted = wanted_topics(specs)
    async with _admin(bootstrap) as admin:
        brokers = len((await admin.describe_cluster())["brokers"])
        factor = replication_factor or min(MAX_DEFAULT_REPLICATION_FACTOR, brokers)
        if factor > brokers:
            raise UnsatisfiableError(
                f"replication factor {factor} needs {factor} brokers; {bootstrap} has {brokers}"
            )
        actual = await read_topics(admin, [w.name for w in wanted])
        changes = plan(wanted, actual, factor)
        if not dry_run:
            await _execute(admin, changes, factor)
    return ApplyResult(bootstrap, brokers, factor, [w.name for w in wanted], changes, dry_run)


@dataclass(frozen=True)
class TopicStatus:
    wanted: WantedTopic
    actual: ActualTopic | None

    def differences(self) -> list[str]:
        if self.actual is None:
            return ["missing"]
        found = []
        if self.actual.partitions != self.wanted.partitions:
            found.append(f"partitions {self.actual.partitions}, {self.wanted.partitions} wanted")
        for key, value in self.wanted.configs.items():
            have = self.actual.configs.get(key)
            if not _same_config(key, have, value):
                found.append(f"{key} {have}, {value} wanted")
        return found


async def describe_topics(bootstrap: str, specs: Sequence[TopicSpec]) -> list[TopicStatus]:
    """Each physical topic of ``specs`` next to what the broker has. Changes nothing."""
    wanted = wanted_topics(specs)
    async with _admin(bootstrap) as admin:
        actual = await read_topics(admin, [w.name for w in wanted])
    return [TopicStatus(w, actual.get(w.name)) for w in wanted]


async def described_topics(admin: AIOKafkaAdminClient, names: Sequence[str]) -> dict[str, Any]:
    """The metadata (partitions, replicas) of the named topics that exist: what a principal
    that may only read or write a topic (DESCRIBE, not DESCRIBE_CONFIGS) can learn of it."""
    # Listing first: a metadata request naming a missing topic may auto-create it on
    # brokers that allow it, with the broker's defaults instead of the registry's.
    existing = set(await admin.list_topics())
    present = [name for name in names if name in existing]
    metadata: dict[str, Any] = {}
    for entry in await admin.describe_topics(present) if present else []:
        if entry["error_code"] == 0:
            metadata[entry["topic"]] = entry
        elif entry["error_code"] != UNKNOWN_TOPIC_OR_PARTITION:
            raise ProvisioningError(
                f"cannot describe {entry['topic']}: {for_code(entry['error_code']).__name__}"
            )
    return metadata


async def read_topics(admin: AIOKafkaAdminClient, names: Sequence[str]) -> dict[str, ActualTopic]:
    """The named topics that exist, with partitions, replication and configs."""
    metadata = await described_topics(admin, names)
    configs: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in metadata]
    for response in await admin.describe_configs(resources) if resources else []:
        for resource in response.to_object()["resources"]:
            if resource["error_code"] != 0:
                raise ProvisioningError(
                    f"cannot read the configs of {resource['resource_name']}:"
                    f" {resource['error_message'] or for_code(resource['error_code']).__name__}"
                )
            effective: dict[str, str] = {}
            dynamic: dict[str, str] = {}
            for entry in resource["config_entries"]:
                if entry["config_value"] is None:
                    continue  # sensitive or unset: nothing to compare or carry over
                effective[entry["config_names"]] = entry["config_value"]
                if entry.get("config_source") == DYNAMIC_TOPIC_CONFIG:
                    dynamic[entry["config_names"]] = entry["config_value"]
            configs[resource["resource_name"]] = (effective, dynamic)
    topics: dict[str, ActualTopic] = {}
    for name, entry in metadata.items():
        partitions = entry["partitions"]
        effective, dynamic = configs.get(name, ({}, {}))
        topics[name] = ActualTopic(
            name=name,
            partitions=len(partitions),
            replication_factor=min((len(p["replicas"]) for p in partitions), default=0),
            configs=effective,
            dynamic=dynamic,
        )
    return topics


async def _execute(admin: AIOKafkaAdminClient, changes: Sequence[Change], factor: int) -> None:
    creates = [c for c in changes if c.action == "create"]
    if creates:
        response = await admin.create_topics(
            [NewTopic(c.topic, c.partitions, factor, topic_configs=dict(c.configs)) for c in creates]
        )
        for error in response.to_object()["topic_errors"]:
            code = error["error_code"]
            # Another creator won the race: the topic exists, the next run reconciles it.
            if code not in (0, TopicAlreadyExistsError.errno):
                raise ProvisioningError(
                    f"cannot create {error['topic']}: {for_code(code).__name__}"
                    f" {error['error_message'] or ''}".rstrip()
                )
    grows = {c.topic: NewPartitions(c.partitions) for c in changes if c.action == "add-partitions"}
    if grows:
        try:
            await admin.create_partitions(grows)
        except KafkaConnectionError:
            raise
        except KafkaError as exc:
            raise ProvisioningError(f"cannot add partitions: {exc}") from None
    alters = [
        ConfigResource(ConfigResourceType.TOPIC, c.topic, dict(c.configs))
        for c in changes
        if c.action == "alter-configs"
    ]
    if alters:
        for response in await admin.alter_configs(alters):
            for resource in response.to_object()["resources"]:
                if resource["error_code"] != 0:
                    raise ProvisioningError(
                        f"cannot alter the configs of {resource['resource_name']}:"
                        f" {resource['error_message'] or for_code(resource['error_code']).__name__}"
                    )


@asynccontextmanager
async def _admin(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client; connection failures become BrokerUnavailableError."""
    admin = make_admin(bootstrap)
    try:
        await admin.start()
        yield admin
    except (TimeoutError, asyncio.TimeoutError, KafkaConnectionError, KafkaTimeoutError) as exc:
        raise BrokerUnavailableError(bootstrap, type(exc).__name__) from None
    finally:
        await admin.close()


def _same_config(key: str, have: str | None, want: str) -> bool:
    if have is None:
        return False
    if key == "cleanup.policy":
        # The broker may list the policies in another order than the yaml.
        return {p.strip() for p in have.split(",")} == {p.strip() for p in want.split(",")}
    return have == want
