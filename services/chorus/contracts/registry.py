"""The event registry: topics, versioned schemas and examples under ``schemas/``.

Layout (modelled on getsentry/sentry-kafka-schemas)::

    schemas/envelope.v1.schema.json
    schemas/topics/<topic>.yaml
    schemas/events/<event_type>.v<N>.schema.json     (generated from chorus.contracts)
    schemas/examples/<event_type>/<N>/*.json         (whole envelopes, synthetic data)

A project's own registry (its ``schemas/`` beside its services, outside this repository)
holds only its topics, events and examples, and a ``project.yaml`` naming the modules of its
event models; it extends the platform's registry (shipped inside the ``chorus`` package),
and every tool reads the union. The platform's events never move into a project, and a
project's never into ``chorus.contracts``.

The registry is loaded once per process; it is read-only afterwards.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import GenerateJsonSchema

import chorus.contracts
from chorus.contracts.approvals import EscalationStep
from chorus.contracts.base import CATALOG, PERSONAL_MARK, UPCASTERS, EventModel
from chorus.contracts.envelope import Envelope, Priority
from chorus.contracts.lifecycle import Signal, SignalAnswer

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID_BASE = "https://chorus.dev/schemas/"
RUNTIME_PRODUCER = "chorus-runtime"
"""Pseudo-producer: every service's runtime emits these on the service's behalf."""
RELAYS = frozenset({"retry.due", "event.dead_lettered"})
"""Types that carry another record whole (its ``original``): personal when that record is."""

BROKER_MAX_MESSAGE_BYTES = 1_048_588
"""Kafka's default ``message.max.bytes`` (a topic without ``max.message.bytes`` takes this)."""
RECORD_FRAMING_BYTES = 512
"""Headroom for the record batch header and per-record framing around value, key and headers."""

Compatibility = Literal["backward", "forward", "full", "none"]
LANE_SUFFIX: dict[str, str] = {"high": ".high", "normal": "", "low": ".low"}


class TopicEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type: str
    versions: list[int] = Field(min_length=1)
    compatibility: Compatibility = "full"
    signed_by: str | list[str] | None = Field(
        default=None,
        description="the service, or services, that state this type: each signs its own and "
        "consumers refuse it from any other (chorus.privacy.signing); for events that carry "
        "authority. Several when several decide it (workflow.ended: whoever takes a workflow's "
        "last step); a project's service joins them with principals.yaml's signs",
    )
    retired: bool = Field(
        default=False,
        description="no service produces it any more: kept so the records written before "
        "still read (a replay, an audit); no service may declare it among what it produces",
    )

    owner_field: str | None = Field(
        default=None,
        description="for a command every service's runtime states for itself (signed_by: "
        "chorus-runtime): the payload field naming what it commands, whose value begins with "
        "the name of the service it belongs to (a timer id); consumers refuse a command for "
        "another service's",
    )

    def signers(self) -> frozenset[str]:
        """Who states this type (empty: anyone who may write its topic)."""
        if self.signed_by is None:
            return frozenset()
        return frozenset([self.signed_by] if isinstance(self.signed_by, str) else self.signed_by)


class TopicSpec(BaseModel):
    """One ``schemas/topics/<topic>.yaml``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str = Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
    description: str
    owner: str
    producers: list[str]
    consumers: list[str]
    partitions: int = Field(ge=1)
    retention_ms: int = Field(ge=-1)
    cleanup_policy: Literal["delete", "compact", "compact,delete"] = "delete"
    message_key: str = "workflow_id"
    lanes: bool = Field(
        default=False,
        description="priority lanes: <topic>.high, <topic> (normal) and <topic>.low",
    )
    external: bool = Field(default=False, description="produced or consumed outside Chorus")
    max_message_bytes: int | None = Field(
        default=None,
        ge=1024,
        description="broker max.message.bytes for this topic (default: the broker's, about 1 MB)",
    )
    events: list[TopicEvent] = Field(min_length=1)

    @model_validator(mode="after")
    def _signers_produce_here(self) -> TopicSpec:
        for ev in self.events:
            if ev.signed_by is not None and not ev.signers():
                raise ValueError(f"{ev.type}: signed_by names no service")
            for signer in sorted(ev.signers() - set(self.producers)):
                raise ValueError(f"{ev.type} is signed_by {signer}, which does not produce {self.topic}")
        return self

    def physical_topics(self) -> list[str]:
        if not self.lanes:
            return [self.topic]
        return [self.topic + LANE_SUFFIX[lane] for lane in ("high", "normal", "low")]

    def physical_topic(self, priority: Priority) -> str:
        return self.topic + LANE_SUFFIX[priority] if self.lanes else self.topic


class ServicePrincipal(BaseModel):
    """One service of ``principals.yaml``: how it connects, what it writes for others."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["runtime", "stream"]
    writes: list[str] = Field(default_factory=list)
    reads: list[str] = Field(
        default_factory=list,
        description="topics it reads beyond the topic files' consumers: a project's service "
        "reading a platform topic (approvals.events), which the project may not edit",
    )
    signs: list[str] = Field(
        default_factory=list,
        description="signed event types it states beside their topic file's signers: a "
        "project's service ending its own workflows (workflow.ended); it must write their topic",
    )
    observes_groups: bool = Field(
        default=False,
        description="describes every service's consumer group and every topic: it reports how "
        "far behind each group is, members or none (a service scaled to zero)",
    )


class PlatformWrites(BaseModel):
    """What a platform service writes for a project (its ``principals.yaml``'s ``platform``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    writes: list[str] = Field(min_length=1)


class Principals(BaseModel):
    """``schemas/principals.yaml``: every Kafka principal beside the topic files' services."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    services: dict[str, ServicePrincipal] = Field(default_factory=dict)
    people: dict[str, Literal["operator", "auditor"]] = Field(default_factory=dict)
    platform: dict[str, PlatformWrites] = Field(
        default_factory=dict,
        description="a project's: topics of its own the platform's services write for it (the "
        "dead-letter service redrives onto them, the timer service fires timers there)",
    )


PROJECT_FILE = "project.yaml"
PLATFORM_CONTRACTS = "chorus.contracts"


class DevStackSettings(BaseModel):
    """``dev:`` of ``project.yaml``: what the dev stack (``make services``, the demo, tests that
    run every service) adds for a project's services."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    sandbox: list[str] = Field(
        default_factory=list,
        description="modules extending the sandbox: SKILLS (the stand-in model's answers to the "
        "project's prompts), TOOL_SKILLS (its turns in a tool-calling loop) and setup(app) "
        "(stand-ins of the project's outside world)",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="environment of the project's services; {sandbox} is the sandbox's URL",
    )


class ProjectFile(BaseModel):
    """``schemas/project.yaml``: this registry is a project's own."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="the project (its topics' first part)")
    contracts: list[str] = Field(
        default_factory=list, description="modules whose import defines the project's event models"
    )
    dev: DevStackSettings = Field(
        default_factory=DevStackSettings, description="how the dev stack runs the project"
    )
    contracts_path: str | None = Field(
        default=None,
        description="where the contracts modules are when not in services/ beside schemas/ "
        "(a test's isolated copy names the project's)",
    )
    extends: Literal["platform", "none"] = Field(
        default="platform",
        description="platform: the union with the platform's registry; none: complete on its "
        "own (a test's isolated copy of the union)",
    )


WORKFLOW_ENDED = "workflow.ended"
WorkflowOutcome = Literal[
    "completed", "rejected", "failed", "compensated", "timed_out", "cancelled", "erased"
]
PLATFORM_ENDINGS: dict[str, tuple[WorkflowOutcome, ...]] = {
    "gateway": ("timed_out", "cancelled"),
    "audit_projector": ("erased",),
}
"""Who ends a workflow of any type, and how: the gateway at its deadline or on a cancel, the
audit projector when its subject is erased."""


SEARCH_ATTRIBUTE_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
BUILTIN_SEARCH_ATTRIBUTES = ("workflow_type", "status", "stage")
"""What every workflow is found by, whatever its type; no declared attribute takes these names
(nor the query language's words: and, or, not, in)."""
_RESERVED_SEARCH_NAMES = frozenset({*BUILTIN_SEARCH_ATTRIBUTES, "and", "or", "not", "in"})


class SearchAttribute(BaseModel):
    """A business attribute of a workflow type: a field of one of its events, projected by the
    audit projector (the latest such event's value) and searched by the list's ``query``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["keyword", "number"] = Field(
        description="keyword: text compared whole (=, !=, IN); number: compared as a number "
        "(=, !=, <, <=, >, >=, IN)"
    )
    event: str = Field(description="the event type it is read from (on a topic the audit projector reads)")
    field: str = Field(
        pattern=r"^(/[A-Za-z_][A-Za-z0-9_]*)+$",
        description="a JSON pointer into that event's payload, through objects only (no personal data)",
    )


SIGNAL_NAME_PATTERN = SEARCH_ATTRIBUTE_PATTERN
SignalRole = Literal["submitter", "reviewer", "operator"]


class SignalDeclaration(BaseModel):
    """A signal a workflow of the type takes while it runs: an event the gateway states on the
    workflow's key for a caller of one of ``roles``; with ``answer``, also an update (the
    caller gets the handler's answer, waiting up to ``timeout_s``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    event: str = Field(
        description="the event type (its model derives from chorus.contracts.lifecycle.Signal; "
        "signed by the gateway alone)"
    )
    roles: list[SignalRole] = Field(
        min_length=1,
        description="who may send it: the workflow's own submitter, a reviewer who may read it "
        "(its approval waits on their tier), any operator",
    )
    answer: str | None = Field(
        default=None,
        description="the event type the handling service answers with (its model derives from "
        "chorus.contracts.lifecycle.SignalAnswer); set, the signal may be sent as an update",
    )
    timeout_s: float = Field(
        default=10.0, gt=0, le=60, description="how long an update waits for the answer before it says 202"
    )


class ResetDeclaration(BaseModel):
    """What a reset from a step must know of a workflow type's events (POST
    /v1/workflows/{id}/reset): which ones a service gives back when a reset goes back past
    them, and which ones nothing can."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    compensated: list[str] = Field(
        default_factory=list,
        description="event types whose effect the service stating them undoes when a reset goes "
        "back past them (its on_reset: a reservation released)",
    )
    irreversible: list[str] = Field(
        default_factory=list,
        description="event types a reset never goes back past: what they did stays done and would "
        "be done twice (a payment issued); the gateway refuses such a reset and says which",
    )


class WorkflowDeclaration(BaseModel):
    """One type of ``workflows.yaml``: what starts it, how long it may run, who ends it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    start: str = Field(description="the start event type: its payload is the submission's input")
    deadline_s: float = Field(default=86400.0, gt=0, description="the longest a workflow of the type runs")
    ended_by: dict[str, list[WorkflowOutcome]] = Field(
        default_factory=dict,
        description="service -> the outcomes it may end a workflow of this type with (beside the "
        "platform's: the gateway's timed_out and cancelled, the audit projector's erased); empty: "
        "any service that signs workflow.ended",
    )
    approval_chain: list[EscalationStep] = Field(
        default_factory=list,
        max_length=10,
        description="who approves for a workflow of the type, tier by tier, when no rule of the "
        "approval gate's policy matches (unanswered, it is rejected); empty: such an approval is "
        "refused. Never the chain a request names: that is its requester's word",
    )
    search_attributes: dict[str, SearchAttribute] = Field(
        default_factory=dict,
        max_length=20,
        description="business attributes a workflow of the type is found by (GET /v1/workflows?query=): "
        "name -> the event and field each is read from, and its type",
    )
    signals: dict[str, SignalDeclaration] = Field(
        default_factory=dict,
        max_length=20,
        description="what may be sent to a running workflow of the type (POST "
        "/v1/workflows/{id}/signals/{name}, and /updates/{name} for those with an answer)",
    )
    reset: ResetDeclaration = Field(
        default_factory=ResetDeclaration,
        description="how a reset from a step treats the type's events (compensated, irreversible)",
    )


WORKFLOW_TYPE_PATTERN = r"^[a-z][a-z0-9_]{0,62}$"


@dataclass(frozen=True)
class Example:
    path: Path
    body: dict[str, Any]


@dataclass
class Registry:
    root: Path
    topics: dict[str, TopicSpec]
    schemas: dict[tuple[str, int], dict[str, Any]]
    envelope_schema: dict[str, Any]
    examples: dict[tuple[str, int], list[Example]] = field(default_factory=dict)
    principals: Principals = field(default_factory=Principals)
    project: ProjectFile | None = None
    """Set when ``root`` is a project's registry (``project.yaml``)."""
    workflows: dict[str, WorkflowDeclaration] = field(default_factory=dict)
    """The workflow types the gateway starts (``workflows.yaml``)."""
    _topic_of: dict[str, TopicSpec] = field(default_factory=dict)
    _physical: dict[str, TopicSpec] = field(default_factory=dict)
    _signed_by: dict[str, frozenset[str]] = field(default_factory=dict)
    _own_commands: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for spec in self.topics.values():
            for physical in spec.physical_topics():
                self._physical[physical] = spec
            for ev in spec.events:
                if ev.type in self._topic_of:
                    raise ValueError(
                        f"event type {ev.type} is declared on two topics: "
                        f"{self._topic_of[ev.type].topic} and {spec.topic}"
                    )
                self._topic_of[ev.type] = spec
                if ev.signed_by is not None:
                    self._signed_by[ev.type] = self._expanded(ev.signers())
                    if RUNTIME_PRODUCER in ev.signers():
                        if ev.owner_field is None:
                            raise ValueError(
                                f"{ev.type} is signed by {RUNTIME_PRODUCER}: name its owner_field "
                                "(what it commands, which begins with its service's name)"
                            )
                        self._own_commands[ev.type] = ev.owner_field
        self._add_principals_signers()
        self._check_endings()
        self._check_search_attributes()
        self._check_signals()
        self._check_resets()
        for name, workflow in self.workflows.items():
            if not re.match(WORKFLOW_TYPE_PATTERN, name):
                raise ValueError(
                    f"workflows.yaml: {name!r} is not a workflow type name ({WORKFLOW_TYPE_PATTERN})"
                )
            start_topic = self._topic_of.get(workflow.start)
            if start_topic is None:
                raise ValueError(
                    f"workflows.yaml: {name} starts with {workflow.start}, no event of the registry"
                )
            if "gateway" not in start_topic.producers:
                raise ValueError(
                    f"workflows.yaml: {name} starts with {workflow.start}, but {start_topic.topic} does "
                    "not list the gateway among its producers (it publishes the start event)"
                )

    def _expanded(self, signers: frozenset[str]) -> frozenset[str]:
        """``signers`` with the runtime (a command every service's runtime writes for
        itself, a timer's) standing for each service that runs it: each signs its own."""
        if RUNTIME_PRODUCER not in signers:
            return signers
        runtime = {name for name, p in self.principals.services.items() if p.kind == "runtime"}
        return frozenset(signers - {RUNTIME_PRODUCER} | runtime)

    def _add_principals_signers(self) -> None:
        """A project's services that state a signed platform type (principals.yaml's
        ``signs``) join its signers; each must write the type's topic."""
        for name, principal in self.principals.services.items():
            for event_type in principal.signs:
                if event_type not in self._signed_by:
                    raise ValueError(
                        f"principals.yaml: {name} signs {event_type}, which is not a signed event type"
                    )
                topic = self._topic_of[event_type]
                if topic.topic not in principal.writes and name not in topic.producers:
                    raise ValueError(
                        f"principals.yaml: {name} signs {event_type} but does not write {topic.topic}"
                    )
                self._signed_by[event_type] |= {name}

    def _check_search_attributes(self) -> None:
        """Each declared attribute names a field, not personal, of the type it says, on a
        topic the audit projector reads (which projects it)."""
        typed: dict[str, tuple[str, str]] = {}
        for name, workflow in self.workflows.items():
            for attribute, declared in workflow.search_attributes.items():
                where = f"workflows.yaml: {name}'s search attribute {attribute}"
                if not re.match(SEARCH_ATTRIBUTE_PATTERN, attribute) or attribute in _RESERVED_SEARCH_NAMES:
                    raise ValueError(
                        f"{where}: a name is lower-case letters, digits and _ ({SEARCH_ATTRIBUTE_PATTERN}), "
                        f"and none of {', '.join(sorted(_RESERVED_SEARCH_NAMES))}"
                    )
                other = typed.setdefault(attribute, (name, declared.type))
                if other[1] != declared.type:
                    raise ValueError(
                        f"{where} is a {declared.type}, but {other[0]}'s is a {other[1]}: one name, one type "
                        "(a query compares it across workflow types)"
                    )
                if declared.event not in self._topic_of:
                    raise ValueError(f"{where}: no event type {declared.event} in the registry")
                if "audit_projector" not in self._topic_of[declared.event].consumers:
                    raise ValueError(
                        f"{where}: {declared.event} is on {self._topic_of[declared.event].topic}, "
                        "which the audit projector does not read"
                    )
                version = max(self.versions(declared.event))
                problem = field_problem(self.schemas.get((declared.event, version), {}), declared)
                if problem:
                    raise ValueError(f"{where}: {declared.event} v{version} {problem}")

    def _check_signals(self) -> None:
        """Each signal is an event of the workflow's own that only the gateway states, a
        Signal; its answer, a SignalAnswer the handling service states; both on topics the
        audit projector reads (the timeline).
        One name is one event across types (a route per name)."""
        events: dict[str, tuple[str, str]] = {}
        for name, workflow in self.workflows.items():
            for signal, declared in workflow.signals.items():
                where = f"workflows.yaml: {name}'s signal {signal}"
                if not re.match(SIGNAL_NAME_PATTERN, signal):
                    raise ValueError(
                        f"{where}: a name is lower-case letters, digits and _ ({SIGNAL_NAME_PATTERN})"
                    )
                other = events.setdefault(signal, (name, declared.event))
                if other[1] != declared.event:
                    raise ValueError(
                        f"{where} is {declared.event}, but {other[0]}'s is {other[1]}: one name, one event"
                    )
                self._check_signal_event(where, declared.event, signed_by_gateway=True)
                if declared.answer is not None:
                    self._check_signal_event(f"{where}'s answer", declared.answer, signed_by_gateway=False)

    def _check_signal_event(self, where: str, event_type: str, *, signed_by_gateway: bool) -> None:
        if event_type not in self._topic_of:
            raise ValueError(f"{where}: no event type {event_type} in the registry")
        topic = self._topic_of[event_type]
        if "audit_projector" not in topic.consumers:
            raise ValueError(
                f"{where}: {event_type} is on {topic.topic}, which the audit projector does not read"
            )
        signers = self.signers_of(event_type)
        if signed_by_gateway and signers != {"gateway"}:
            raise ValueError(
                f"{where}: {event_type} must be signed by the gateway alone (it is by {sorted(signers)})"
            )
        if not signed_by_gateway and (not signers or "gateway" in signers):
            raise ValueError(f"{where}: {event_type} must be signed by the service that handles the signal")
        version = max(self.versions(event_type))
        base = Signal if signed_by_gateway else SignalAnswer
        model = CATALOG.get((event_type, version))
        if model is None or not issubclass(model, base):
            raise ValueError(
                f"{where}: {event_type} v{version}'s model must derive from "
                f"chorus.contracts.lifecycle.{base.__name__} (its {', '.join(sorted(base.model_fields))})"
            )

    def _check_resets(self) -> None:
        for name, workflow in self.workflows.items():
            declared = workflow.reset
            for kind, types in (
                ("compensated", declared.compensated),
                ("irreversible", declared.irreversible),
            ):
                for event_type in types:
                    if event_type not in self._topic_of:
                        where = f"workflows.yaml: {name}'s reset.{kind}"
                        raise ValueError(f"{where}: no event type {event_type} in the registry")
            both = set(declared.compensated) & set(declared.irreversible)
            if both:
                raise ValueError(
                    f"workflows.yaml: {name}'s reset: {', '.join(sorted(both))} cannot be both "
                    "compensated and irreversible"
                )

    def reset_of(self, workflow_type: str) -> ResetDeclaration:
        """How a reset treats ``workflow_type``'s events (nothing declared for an unknown type)."""
        workflow = self.workflows.get(workflow_type)
        return workflow.reset if workflow else ResetDeclaration()

    def signals(self, workflow_type: str) -> dict[str, SignalDeclaration]:
        """The signals ``workflow_type`` takes (none for an unknown type)."""
        workflow = self.workflows.get(workflow_type)
        return dict(workflow.signals) if workflow else {}

    def answer_types(self) -> frozenset[str]:
        """The event types that answer some signal (what the read model shows as answers)."""
        return frozenset(
            declared.answer
            for workflow in self.workflows.values()
            for declared in workflow.signals.values()
            if declared.answer is not None
        )

    def signal_names(self) -> dict[str, str]:
        """Every declared signal name -> its event type, across the workflow types."""
        return {
            signal: declared.event
            for workflow in self.workflows.values()
            for signal, declared in workflow.signals.items()
        }

    def search_attributes(self, workflow_type: str) -> dict[str, SearchAttribute]:
        """The business attributes ``workflow_type`` is searched by (none for an unknown type)."""
        workflow = self.workflows.get(workflow_type)
        return dict(workflow.search_attributes) if workflow else {}

    def _check_endings(self) -> None:
        """Every service a workflow type says may end it signs workflow.ended."""
        signers = self._signed_by.get(WORKFLOW_ENDED, frozenset())
        for name, workflow in self.workflows.items():
            for service in workflow.ended_by:
                if service not in signers:
                    raise ValueError(
                        f"workflows.yaml: {name} is ended_by {service}, which does not sign "
                        f"{WORKFLOW_ENDED} (its signers: {', '.join(sorted(signers)) or 'none'})"
                    )

    # -- lookups ---------------------------------------------------------------

    def endings(self) -> dict[str, dict[str, frozenset[str]]]:
        """Workflow type -> outcome -> the services that may end a workflow of that type with
        that outcome, for the types whose ``workflows.yaml`` entry says (``ended_by``)."""
        found: dict[str, dict[str, frozenset[str]]] = {}
        for name, workflow in self.workflows.items():
            if not workflow.ended_by:
                continue
            by_outcome: dict[str, set[str]] = {}
            for declared in (PLATFORM_ENDINGS, workflow.ended_by):
                for service, outcomes in declared.items():
                    for outcome in outcomes:
                        by_outcome.setdefault(outcome, set()).add(service)
            found[name] = {outcome: frozenset(services) for outcome, services in by_outcome.items()}
        return found

    def event_types(self) -> list[str]:
        return sorted(self._topic_of)

    def retired(self) -> frozenset[str]:
        """The event types no service produces any more (read, never published)."""
        return frozenset(ev.type for spec in self.topics.values() for ev in spec.events if ev.retired)

    def signed_by(self) -> dict[str, frozenset[str]]:
        """Event type -> the services that may state it, for the signed types."""
        return dict(self._signed_by)

    def own_commands(self) -> Mapping[str, str]:
        """The signed types every service's runtime states for itself (timer commands), each
        with the payload field naming whose it is (``owner_field``). Not a copy: the outbox
        asks for every signed record it writes."""
        return self._own_commands

    def signers_of(self, event_type: str) -> frozenset[str]:
        """The services that state ``event_type`` (empty when it is not signed)."""
        return self._signed_by.get(event_type, frozenset())

    def signers(self) -> list[str]:
        """Every service that signs some event type: each holds a private key."""
        return sorted(set().union(*self._signed_by.values()))

    def topic_for(self, event_type: str) -> TopicSpec:
        return self._topic_of[event_type]

    def reads(self, service: str) -> set[str]:
        """The topics (by their file's name) ``service`` reads: those whose file names it a
        consumer (or names the runtime, when the service runs it) and those its principal
        ``reads`` beyond them. Its Kafka ACLs grant exactly these."""
        principal = self.principals.services.get(service)
        runtime = principal is not None and principal.kind == "runtime"
        names = {service, RUNTIME_PRODUCER} if runtime else {service}
        beyond = set(principal.reads) if principal is not None else set()
        return {t.topic for t in self.topics.values() if names & set(t.consumers) or t.topic in beyond}

    def writes(self, service: str) -> set[str]:
        """The topics (by their file's name) ``service`` writes: those whose file names it a
        producer (or names the runtime, when the service runs it) and those its principal
        ``writes`` beyond them, as its Kafka ACLs grant them."""
        principal = self.principals.services.get(service)
        runtime = principal is not None and principal.kind == "runtime"
        names = {service, RUNTIME_PRODUCER} if runtime else {service}
        beyond = set(principal.writes) if principal is not None else set()
        return {t.topic for t in self.topics.values() if names & set(t.producers) or t.topic in beyond}

    def handles_personal(self, service: str) -> bool:
        """Whether a topic ``service`` reads or writes carries a type with personal fields
        (chorus.privacy.crypto), so that it needs data keys. Relays do not count: what they
        carry is a record of the service's own topics, personal only if those are. Nor does
        a type every runtime may state for itself (an agent loop's turns): only a service
        that says it states it (principals.yaml ``signs``) seals it."""
        principal = self.principals.services.get(service)
        states = set(principal.signs) if principal is not None else set()
        return bool(
            (self.reads(service) | self.writes(service)) & self._personal_topics
            or states & self._runtime_personal_types
        )

    @cached_property
    def _runtime_personal_types(self) -> frozenset[str]:
        runtime_stated = {
            ev.type for spec in self.topics.values() for ev in spec.events if RUNTIME_PRODUCER in ev.signers()
        }
        return frozenset(
            event_type
            for (event_type, _), schema in self.schemas.items()
            if event_type in runtime_stated and personal_pointers(schema)
        )

    @cached_property
    def _personal_topics(self) -> frozenset[str]:
        """The topics (by their file's name) that carry a type with personal fields, relays
        aside: worked out once (the key service asks on every key it hands out)."""
        return frozenset(
            spec.topic
            for (event_type, _), schema in self.schemas.items()
            if event_type not in RELAYS
            and event_type not in self._runtime_personal_types
            and (spec := self._topic_of.get(event_type)) is not None
            and personal_pointers(schema)
        )

    def topic_of_physical(self, physical: str) -> TopicSpec | None:
        return self._physical.get(physical)

    def size_limit(self, physical: str, default: int) -> int:
        """The largest record a consumer accepts from ``physical``: its own ``default``,
        or the topic's max_message_bytes when that allows more. Dead letters carry whole
        records, so a consumer of them must take what the topic takes; live consumers and
        replays both ask here so they agree on what decodes."""
        spec = self._physical.get(physical)
        return max(default, spec.max_message_bytes or 0) if spec else default

    def publish_limit(self, physical: str) -> int:
        """The largest record (value + key + headers) Chorus publishes to ``physical``: the
        topic's max_message_bytes (else the broker's default), less room for the record
        batch's own framing. Anything larger would be refused by the broker."""
        spec = self._physical.get(physical)
        limit = spec.max_message_bytes if spec and spec.max_message_bytes else BROKER_MAX_MESSAGE_BYTES
        return limit - RECORD_FRAMING_BYTES

    def knows(self, event_type: str) -> bool:
        return event_type in self._topic_of

    def versions(self, event_type: str) -> list[int]:
        spec = self._topic_of[event_type]
        return next(ev.versions for ev in spec.events if ev.type == event_type)

    def compatibility(self, event_type: str) -> Compatibility:
        spec = self._topic_of[event_type]
        return next(ev.compatibility for ev in spec.events if ev.type == event_type)

    def latest_version(self, event_type: str) -> int:
        return max(self.versions(event_type))

    def model(self, event_type: str, version: int) -> type[EventModel]:
        return CATALOG[(event_type, version)]

    def latest_model(self, event_type: str) -> type[EventModel]:
        """The model of ``event_type``'s latest version (what this code states it as)."""
        return self.model(event_type, self.latest_version(event_type))

    def physical_topic(self, event_type: str, priority: Priority = "normal") -> str:
        return self._topic_of[event_type].physical_topic(priority)


def platform_schemas_dir() -> Path:
    """The platform's own registry: inside the installed package (the wheel ships it), which
    in a checkout of this repository links to its ``schemas/``."""
    return Path(chorus.contracts.__file__).resolve().parent / "schemas"


def default_schemas_dir() -> Path:
    """The registry of the project Chorus runs in: ``CHORUS_SCHEMAS_DIR``, else the first
    ``schemas/`` with ``topics/`` in the working directory or a parent of it, else the
    platform's own."""
    configured = os.environ.get("CHORUS_SCHEMAS_DIR")
    if configured:
        return Path(configured)
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "schemas" / "topics").is_dir():
            return folder / "schemas"
    return platform_schemas_dir()


def read_project(root: Path) -> ProjectFile | None:
    """``root/project.yaml`` (None when ``root`` is the platform's registry or a complete copy)."""
    path = root / PROJECT_FILE
    if not path.is_file():
        return None
    try:
        return ProjectFile.model_validate(yaml.safe_load(path.read_text()))
    except Exception as exc:
        raise ValueError(f"{path}: {exc}") from exc


def import_contracts(project: ProjectFile, root: Path) -> None:
    """Import the project's event models, so they join the catalog. A project's tools run
    from its folder without installing it: its ``services/`` (beside ``schemas/``) is where
    the scaffold puts them, so it is searched when the module is not importable already."""
    for module in project.contracts:
        try:
            importlib.import_module(module)
            continue
        except ModuleNotFoundError as exc:
            services = Path(project.contracts_path or root.resolve().parent / "services")
            if exc.name != module.split(".")[0] or not services.is_dir():
                raise ValueError(f"{root / PROJECT_FILE}: contracts module {module}: {exc}") from exc
        sys.path.append(str(services))
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise ValueError(f"{root / PROJECT_FILE}: contracts module {module}: {exc}") from exc


@dataclass
class _Files:
    """What one registry folder holds."""

    topics: dict[str, TopicSpec]
    schemas: dict[tuple[str, int], dict[str, Any]]
    examples: dict[tuple[str, int], list[Example]]
    principals: Principals
    envelope: dict[str, Any] | None
    workflows: dict[str, WorkflowDeclaration]


def _read_files(root: Path) -> _Files:
    if not (root / "topics").is_dir():
        raise FileNotFoundError(f"no event registry at {root} (set CHORUS_SCHEMAS_DIR)")
    topics: dict[str, TopicSpec] = {}
    for path in sorted((root / "topics").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        try:
            spec = TopicSpec.model_validate(data)
        except Exception as exc:
            raise ValueError(f"{path}: {exc}") from exc
        if path.stem != spec.topic:
            raise ValueError(f"{path}: file name must be the topic name {spec.topic}.yaml")
        topics[spec.topic] = spec
    schemas: dict[tuple[str, int], dict[str, Any]] = {}
    for path in sorted((root / "events").glob("*.schema.json")):
        event_type, version = parse_schema_filename(path.name)
        schemas[(event_type, version)] = json.loads(path.read_text())
    examples: dict[tuple[str, int], list[Example]] = {}
    for path in sorted((root / "examples").glob("*/*/*.json")):
        key = (path.parent.parent.name, int(path.parent.name))
        examples.setdefault(key, []).append(Example(path, json.loads(path.read_text())))
    envelope_path = root / "envelope.v1.schema.json"
    envelope = json.loads(envelope_path.read_text()) if envelope_path.is_file() else None
    principals = Principals()
    if (root / "principals.yaml").is_file():  # a test's own registry may have none
        try:
            principals = Principals.model_validate(yaml.safe_load((root / "principals.yaml").read_text()))
        except Exception as exc:
            raise ValueError(f"{root / 'principals.yaml'}: {exc}") from exc
    workflows: dict[str, WorkflowDeclaration] = {}
    if (root / "workflows.yaml").is_file():
        try:
            raw = yaml.safe_load((root / "workflows.yaml").read_text()) or {}
            workflows = {name: WorkflowDeclaration.model_validate(body) for name, body in raw.items()}
        except Exception as exc:
            raise ValueError(f"{root / 'workflows.yaml'}: {exc}") from exc
    return _Files(topics, schemas, examples, principals, envelope, workflows)


def _extend(base: _Files, own: _Files, root: Path) -> _Files:
    """The platform's registry with a project's on top; the project may add, never redefine."""
    for kind, theirs, ours in (
        ("topic", base.topics, own.topics),
        ("event schema", base.schemas, own.schemas),
        ("principal", base.principals.services, own.principals.services),
        ("person", base.principals.people, own.principals.people),
        ("workflow type", base.workflows, own.workflows),
    ):
        clash = sorted(map(str, theirs.keys() & ours.keys()))
        if clash:
            raise ValueError(f"{root}: the platform's registry has the {kind}(s) {clash} already")
    services = {**base.principals.services, **own.principals.services}
    for name, extra in own.principals.platform.items():
        if name not in base.principals.services:
            raise ValueError(f"{root / 'principals.yaml'}: platform names {name}, no service of the platform")
        granted = base.principals.services[name]
        services[name] = granted.model_copy(update={"writes": [*granted.writes, *extra.writes]})
    principals = Principals(services=services, people={**base.principals.people, **own.principals.people})
    return _Files(
        {**base.topics, **own.topics},
        {**base.schemas, **own.schemas},
        {**base.examples, **own.examples},
        principals,
        base.envelope,
        {**base.workflows, **own.workflows},
    )


def load_registry(root: Path | None = None) -> Registry:
    root = root or default_schemas_dir()
    project = read_project(root)
    if project is not None:
        import_contracts(project, root)
    files = _read_files(root)
    if project is not None and project.extends == "platform":
        files = _extend(_read_files(platform_schemas_dir()), files, root)
    if files.envelope is None:
        raise FileNotFoundError(
            f"{root}: no envelope.v1.schema.json (nor a project.yaml extending the platform)"
        )
    unknown = {t for s in files.principals.services.values() for t in (*s.writes, *s.reads)} | {
        t for p in files.principals.platform.values() for t in p.writes
    }
    unknown -= files.topics.keys()
    if unknown:
        raise ValueError(f"{root / 'principals.yaml'}: names unknown topics {sorted(unknown)}")
    return Registry(
        root,
        files.topics,
        files.schemas,
        files.envelope,
        files.examples,
        files.principals,
        project,
        files.workflows,
    )


@cache
def default_registry() -> Registry:
    return load_registry()


def parse_schema_filename(name: str) -> tuple[str, int]:
    """``invoice.received.v2.schema.json`` -> (``invoice.received``, 2)."""
    stem = name.removesuffix(".schema.json")
    event_type, _, version = stem.rpartition(".v")
    if not event_type or not version.isdigit():
        raise ValueError(f"schema file {name} is not named <event_type>.v<N>.schema.json")
    return event_type, int(version)


# -- generation from the models ------------------------------------------------------


class _ContractSchema(GenerateJsonSchema):
    """Pydantic's JSON Schema without per-field titles (they only repeat the field name)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def model_schema(model: type[BaseModel], schema_id: str) -> dict[str, Any]:
    body = model.model_json_schema(schema_generator=_ContractSchema)
    return {"$schema": JSON_SCHEMA_DIALECT, "$id": SCHEMA_ID_BASE + schema_id, **body}


def event_schema(event_type: str, version: int) -> dict[str, Any]:
    model = CATALOG[(event_type, version)]
    body = model_schema(model, f"events/{event_type}.v{version}.schema.json")
    body["x-event-type"] = event_type
    body["x-version"] = version
    return body


def field_problem(schema: dict[str, Any], attribute: SearchAttribute) -> str | None:
    """What keeps ``attribute.field`` of an event ``schema`` from being a search attribute
    of ``attribute.type`` (None when nothing does): a field it lacks, one inside personal data,
    or one of another type."""
    defs: dict[str, Any] = schema.get("$defs") or {}

    def resolved(node: dict[str, Any]) -> list[dict[str, Any]]:
        """``node``'s alternatives, references followed (an optional field is one or null)."""
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return resolved(defs.get(ref.removeprefix("#/$defs/"), {}))
        if "anyOf" in node:
            return [leaf for branch in node["anyOf"] for leaf in resolved(branch)]
        return [node]

    def marked(node: dict[str, Any]) -> bool:
        """Personal data, said of the node itself or of what it refers to."""
        ref = node.get("$ref")
        target = defs.get(ref.removeprefix("#/$defs/"), {}) if isinstance(ref, str) else {}
        return bool(node.get(PERSONAL_MARK) or target.get(PERSONAL_MARK))

    nodes = resolved(schema)
    for part in attribute.field.strip("/").split("/"):
        fields = [(n.get("properties") or {}).get(part) for n in nodes]
        children = [child for child in fields if isinstance(child, dict)]
        if not children:
            return f"has no field {attribute.field}"
        if any(marked(child) for child in children):
            return f"{attribute.field}: personal data is never a search attribute"
        nodes = [leaf for child in children for leaf in resolved(child)]
    types = {n.get("type") for n in nodes if n.get("type") != "null"} | {
        type(n["const"]).__name__ for n in nodes if "const" in n
    }
    wanted = {"keyword": {"string", "str"}, "number": {"integer", "number"}}[attribute.type]
    if not types or not types <= wanted:
        said = ", ".join(sorted(str(t) for t in types)) or "no single type"
        return f"{attribute.field} is {said}, not a {attribute.type}"
    return None


def personal_pointers(schema: dict[str, Any], prefix: str = "") -> list[str]:
    """JSON pointers (into the payload) of the fields an event schema marks as personal data
    (``x-personal``, from ``chorus.contracts.base.Personal``), through nested objects, in
    property order. A marked object counts as a whole: its inside is not listed again."""
    found: list[str] = []
    defs: dict[str, Any] = schema.get("$defs") or {}

    def walk(node: Any, ptr: str) -> None:
        if not isinstance(node, dict):
            return
        if node.get(PERSONAL_MARK):
            found.append(ptr or "/")
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            walk(defs.get(ref.removeprefix("#/$defs/")), ptr)
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{ptr}/{name}")
        for branch in node.get("anyOf") or []:
            walk(branch, ptr)

    walk(schema, prefix)
    return found


def contract_modules(root: Path | None = None) -> list[str]:
    """Whose models the registry at ``root`` publishes: a project's contracts modules, else
    the platform's."""
    root = root or default_schemas_dir()
    project = read_project(root)
    if project is None:
        return [PLATFORM_CONTRACTS]
    import_contracts(project, root)
    return project.contracts


def contract_catalog(
    modules: Sequence[str] = (PLATFORM_CONTRACTS,),
) -> dict[tuple[str, int], type[EventModel]]:
    """The registry's models: those of ``modules`` (chorus.contracts: the platform's), not
    test- or bench-only ones that tests register on their own topics in the same process."""
    assert chorus.contracts.CATALOG is CATALOG
    return {
        k: m
        for k, m in CATALOG.items()
        if any(m.__module__ == name or m.__module__.startswith(name + ".") for name in modules)
    }


def generated_files(root: Path | None = None) -> dict[str, str]:
    """Relative path under the registry at ``root`` -> JSON text, for every model it
    publishes (the envelope's schema is the platform's alone)."""
    modules = contract_modules(root)
    files = {}
    if modules == [PLATFORM_CONTRACTS]:
        files["envelope.v1.schema.json"] = dump_json(model_schema(Envelope, "envelope.v1.schema.json"))
    for event_type, version in sorted(contract_catalog(modules)):
        files[f"events/{event_type}.v{version}.schema.json"] = dump_json(event_schema(event_type, version))
    return files


def dump_json(body: Any) -> str:
    return json.dumps(body, indent=2, sort_keys=False) + "\n"


def write_generated(root: Path) -> list[str]:
    """Write generated schemas; delete stale generated files. Returns changed paths."""
    changed: list[str] = []
    files = generated_files(root)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(rel)
    for path in (root / "events").glob("*.schema.json"):
        rel = f"events/{path.name}"
        if rel not in files:
            path.unlink()
            changed.append(rel)
    return changed


def upcaster_gaps(modules: Sequence[str] = (PLATFORM_CONTRACTS,)) -> list[str]:
    """Every missing step in the version chains of the catalog."""
    gaps: list[str] = []
    versions: dict[str, list[int]] = {}
    for event_type, version in contract_catalog(modules):
        versions.setdefault(event_type, []).append(version)
    for event_type, vs in sorted(versions.items()):
        for v in range(1, max(vs)):
            if (event_type, v) not in UPCASTERS:
                gaps.append(f"{event_type}: no upcaster v{v} -> v{v + 1}")
    return gaps
