"""The audit projector: every workflow event it reads becomes one row of its projection,
in the schema it was wired for; services' confirmations of erasures go to the ledger.
What a row says and how a workflow's status folds are tests/services/audit_projector/test_domain.py's;
writing them (retired workflows dropped, erased subjects redacted) is PostgreSQL's."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from chorus.contracts.base import EventModel
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.lifecycle import ResetRequested
from chorus.contracts.platform import DataRemoved
from chorus.contracts.registry import load_registry
from chorus.kernel.codec import Event
from chorus.kernel.service import ServiceSpec
from chorus.platform.audit_projector.adapters.maintenance import RecordConfirmation
from chorus.platform.audit_projector.adapters.projection import SCHEMA as LIVE
from chorus.platform.audit_projector.adapters.projection import ProjectEvent, UndoEvents
from chorus.platform.audit_projector.bootstrap import bootstrap_for
from chorus.platform.audit_projector.handlers import PROJECTED
from chorus.platform.audit_projector.service import SPEC, make_spec
from chorus.testing import WorkflowHarness
from tests.support.events import approval_decided
from tests.support.examples import example

SUPPORT = Path(__file__).resolve().parents[3] / "examples" / "support" / "schemas"
DECIDED = approval_decided()
ERASED = DataRemoved(
    request="erasure",
    request_id="er-7",
    service="budget_agent",
    workflows=2,
    rows={"budget_agent.state": 2, "budget_agent.reservations": 3},
)


@asynccontextmanager
async def wired(spec: ServiceSpec[Any, Any], ledger: str | None = None) -> AsyncIterator[WorkflowHarness]:
    """``spec`` with the dependencies its own wiring gives it (``ledger``: a replay's)."""
    async with bootstrap_for(spec.name, ledger)(None) as deps:
        yield WorkflowHarness(spec, deps)


@pytest.fixture
async def projector() -> AsyncIterator[WorkflowHarness]:
    async with wired(SPEC) as live:
        yield live


def from_release(event: Event[Any], service: str, version: str) -> Event[Any]:
    producer = ProducerRef(service=service, version=version)
    return dataclasses.replace(event, envelope=event.envelope.model_copy(update={"producer": producer}))


@pytest.mark.parametrize("model", PROJECTED, ids=lambda model: model.event_type)
async def test_every_event_it_reads_becomes_one_row_of_the_live_projection(
    projector: WorkflowHarness, model: type[EventModel]
) -> None:
    """Whatever the event says: one that decoded is worth recording, and recording emits nothing."""
    step = await projector.deliver(example(model), "wf-1")
    [effect] = step.outcome.effects
    # A reset's request is one row too, and strikes the events after its point out.
    row = effect.request if isinstance(effect, UndoEvents) else effect
    assert isinstance(row, ProjectEvent)
    assert isinstance(effect, UndoEvents) == (model is ResetRequested)
    assert (row.schema, row.ledger) == (LIVE, LIVE)
    assert (row.entry.event_id, row.entry.event_type) == (step.event.envelope.event_id, model.event_type)
    assert step.emitted == []


async def test_a_row_records_who_decided_what_in_which_release_and_when_it_was_seen(
    projector: WorkflowHarness,
) -> None:
    event = from_release(projector.event(DECIDED, "wf-1", subject_ref="subject:7"), "approval_gate", "1.4.0")
    projector.clock.advance(3)
    [row] = (await projector.deliver(event)).outcome.effects
    assert isinstance(row, ProjectEvent)
    entry = row.entry
    assert (entry.decision, entry.actor) == ("approve", "dana.manager")
    assert (entry.producer, entry.producer_version) == ("approval_gate", "1.4.0")
    assert (entry.workflow_id, entry.subject_ref) == ("wf-1", "subject:7")
    assert entry.trace_id == event.envelope.traceparent[3:35]
    assert entry.payload == event.envelope.payload  # as it was sent
    assert row.payload == DECIDED
    assert (entry.occurred_at, row.recorded_at) == (event.envelope.occurred_at, projector.clock.now())


async def test_a_services_confirmation_of_an_erasure_is_kept_in_the_ledger(
    projector: WorkflowHarness,
) -> None:
    step = await projector.deliver(ERASED, "erasure:er-7")
    assert step.outcome.effects == [RecordConfirmation(LIVE, ERASED, confirmed_at=projector.clock.now())]
    assert step.emitted == []


async def test_a_replay_writes_its_own_schema_and_reads_the_live_ledger() -> None:
    """A rebuilt projection never touches the live one, and still drops what the live
    ledger says was retired or erased."""
    async with wired(make_spec("audit_replay_1"), ledger=LIVE) as replay:
        [row] = (await replay.deliver(DECIDED, "wf-1")).outcome.effects
        assert isinstance(row, ProjectEvent)
        assert (row.schema, row.ledger) == ("audit_replay_1", LIVE)
        [confirmation] = (await replay.deliver(ERASED, "erasure:er-7")).outcome.effects
        assert isinstance(confirmation, RecordConfirmation) and confirmation.ledger == LIVE


async def test_a_projects_own_events_are_projected_beside_the_platforms() -> None:
    support = load_registry(SUPPORT)
    received = example(support.model("ticket.received", 1), support)
    assert SPEC.handler_for("ticket.received") is None  # the platform's projector does not know it
    async with wired(make_spec(LIVE, support)) as projector:
        [row] = (await projector.deliver(received, "wf-t1", workflow_type="support_ticket")).outcome.effects
        assert isinstance(row, ProjectEvent)
        assert (row.entry.event_type, row.entry.workflow_type) == ("ticket.received", "support_ticket")
        assert row.payload == received
