"""The projector's handler. Every event it consumes is projected the same way, so one
function serves every route (one ``On`` per event type in ``service.py``); what differs
by event type lives in ``domain`` (decision, actor, external call, status rules)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chorus.contracts.approvals import (
    ApprovalDecided,
    ApprovalDecisionSubmitted,
    ApprovalEscalated,
    ApprovalRequested,
    ApprovalRouted,
    ApprovalWindowElapsed,
)
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.lifecycle import (
    AgentOutputStreamed,
    AgentTurnRecorded,
    ResetApplied,
    ResetRequested,
    SpendRecorded,
    StageDeadlineReached,
    SubmitterNotified,
    WorkflowAttentionNeeded,
    WorkflowCancelRequested,
    WorkflowDeadlineReached,
    WorkflowEnded,
    WorkflowStarted,
)
from chorus.contracts.platform import (
    DataRemoved,
    EventDeadLettered,
    ReviewRequested,
)
from chorus.contracts.procurement import (
    BudgetRejected,
    BudgetReleased,
    BudgetReserved,
    InvoiceCorrectionRequested,
    InvoiceLineAdded,
    InvoiceLineChecked,
    InvoiceReceived,
    InvoiceRejected,
    InvoiceValidated,
    PaymentFailed,
    PaymentIssued,
    RequesterNotified,
)
from chorus.contracts.registry import Registry, SearchAttribute
from chorus.contracts.research import (
    ReportDelivered,
    ReportDrafted,
    ReportRequested,
    SourceFetched,
    SourceFetchFailed,
    SourceFetchRequested,
)
from chorus.kernel.codec import Event
from chorus.kernel.service import Context, Outcome, Reset
from chorus.platform.audit_projector.adapters.maintenance import RecordConfirmation
from chorus.platform.audit_projector.adapters.projection import SCHEMA, ProjectEvent, UndoEvents
from chorus.platform.audit_projector.domain import attributes_of, audit_entry

# The event types projected: exactly those of the topics that list audit_projector as a
# consumer (workflows.lifecycle, procurement.events, research.events, research.sources, approvals.events,
# chorus.reviews, chorus.deadletters, chorus.resets; chorus.data brings the confirmations, which are
# ledger, not projection); a unit test holds this to the registry.
PROJECTED: tuple[type[EventModel], ...] = (
    WorkflowStarted,
    WorkflowEnded,
    WorkflowDeadlineReached,
    WorkflowCancelRequested,
    StageDeadlineReached,
    WorkflowAttentionNeeded,
    SubmitterNotified,
    ResetRequested,
    ResetApplied,
    SpendRecorded,
    AgentTurnRecorded,
    AgentOutputStreamed,
    InvoiceReceived,
    InvoiceValidated,
    InvoiceRejected,
    InvoiceCorrectionRequested,
    InvoiceLineAdded,
    InvoiceLineChecked,
    BudgetReserved,
    BudgetRejected,
    PaymentIssued,
    PaymentFailed,
    BudgetReleased,
    RequesterNotified,
    ReportRequested,
    ReportDrafted,
    ReportDelivered,
    SourceFetchRequested,
    SourceFetched,
    SourceFetchFailed,
    ApprovalRequested,
    ApprovalRouted,
    ApprovalEscalated,
    ApprovalWindowElapsed,
    ApprovalDecisionSubmitted,
    ApprovalDecided,
    ReviewRequested,
    EventDeadLettered,
)


def search_of(registry: Registry) -> dict[str, dict[str, SearchAttribute]]:
    """Each workflow type's search attributes (those that declare any)."""
    declared = {name: registry.search_attributes(name) for name in registry.workflows}
    return {name: attributes for name, attributes in declared.items() if attributes}


def project_events(registry: Registry) -> list[type[EventModel]]:
    """The models of a project's events the projector records: those on topics that list it
    as a consumer, beyond the platform's it knows by name (PROJECTED). Empty for the
    platform's own registry."""
    known = {model.event_type for model in PROJECTED} | {DataRemoved.event_type}
    data = set(registry.topic_for(DataRemoved.event_type).physical_topics())
    return [
        registry.latest_model(ev.type)
        for spec in registry.topics.values()
        if SCHEMA in spec.consumers and not data & set(spec.physical_topics())
        for ev in spec.events
        if ev.type not in known
    ]


def projected(registry: Registry) -> tuple[type[EventModel], ...]:
    """Every event model the projection shows for ``registry``: the platform's and its
    project's (what the live projector handles, and what a replay rebuilds)."""
    return (*PROJECTED, *project_events(registry))


@dataclass(frozen=True)
class ProjectorDeps:
    """Where projections go: ``schema`` receives the rows, ``ledger`` (the live
    projection's schema) says what was erased or retired. Equal for the live
    projector; a replay writes elsewhere and reads the live ledger."""

    schema: str
    ledger: str
    search: Mapping[str, Mapping[str, SearchAttribute]] = field(default_factory=dict)
    """Workflow type -> its search attributes (workflows.yaml): what each event states."""


async def on_workflow_event(
    event: Event[EventModel], state: None, ctx: Context[ProjectorDeps]
) -> Outcome[Any]:
    """Project ``event`` into the audit log and its workflow's status, as an effect
    committed with the event's inbox row. Emits nothing; never fails on content (an
    event that decoded is an event worth recording). A reset (live, every service's
    runtime answers it first: ``on_reset``) strikes the events after its point out."""
    if isinstance(event.payload, ResetRequested):
        return Outcome(effects=[undo(event.envelope, event.payload, ctx.deps, ctx.clock.now())])
    entry = audit_entry(event.envelope, event.payload)
    return Outcome(
        effects=[
            ProjectEvent(
                schema=ctx.deps.schema,
                ledger=ctx.deps.ledger,
                entry=entry,
                payload=event.payload,
                recorded_at=ctx.clock.now(),
                attributes=attributes_of(entry, event.payload, ctx.deps.search),
            )
        ]
    )


async def on_data_removed(
    event: Event[DataRemoved], state: None, ctx: Context[ProjectorDeps]
) -> Outcome[Any]:
    """Keep a service's confirmation of an erasure or retirement in the ledger, where the
    operator's ``chorus erase`` (and ``GET /v1/erasures/{id}``) finds it."""
    return Outcome(effects=[RecordConfirmation(ctx.deps.ledger, event.payload, confirmed_at=ctx.clock.now())])


async def on_reset(reset: Reset, deps: ProjectorDeps) -> Outcome[Any]:
    """An operator reset the workflow: the projector's part as every service's runtime
    answers it (a replay gets the same from ``on_workflow_event``)."""
    request = ResetRequested.model_validate(reset.envelope.payload)
    return Outcome(effects=[undo(reset.envelope, request, deps, reset.now)])


def undo(envelope: Envelope, request: ResetRequested, deps: ProjectorDeps, now: datetime) -> UndoEvents:
    """The request joins the timeline, the events after its point are struck out of the
    workflow's status (and stay in its timeline), and an operator's correction of the point
    is recorded as the event it is."""
    entry = audit_entry(envelope, request)
    projected_request = ProjectEvent(
        schema=deps.schema, ledger=deps.ledger, entry=entry, payload=request, recorded_at=now
    )
    return UndoEvents(projected_request, request.reset_id, request.undone, request.replacement, deps.search)
