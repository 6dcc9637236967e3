"""The rollout service: what it records about the workflows of each release, which the
status and the automatic-rollback rule count (tests/features/releases/test_pinning.py holds the rule
and the policy changes; the counting is SQL)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from chorus.base.errors import PersistentError
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.lifecycle import WorkflowEnded, WorkflowStarted
from chorus.contracts.platform import ReviewRequested
from chorus.contracts.rollouts import ReleaseReported, RepinAnswered
from chorus.kernel.codec import Event
from chorus.platform.rollout_service.adapters.repository import (
    RecordEnd,
    RecordFailure,
    RecordPins,
    RecordRepinAnswer,
    RecordReport,
)
from chorus.platform.rollout_service.service import SPEC
from chorus.testing import WorkflowHarness
from tests.support.events import dead_lettered
from tests.support.examples import example

PINS = {"invoice_agent": "2.0", "budget_agent": "main"}
STARTED = WorkflowStarted(submitted_by="sam", start_event_type="invoice.received")


@pytest.fixture
def rollouts() -> WorkflowHarness:
    return WorkflowHarness(SPEC)


def stamped(event: Event[Any], **envelope: Any) -> Event[Any]:
    """``event`` with envelope fields the harness does not set (pins, producer)."""
    return dataclasses.replace(event, envelope=event.envelope.model_copy(update=envelope))


async def test_a_workflow_is_counted_for_the_releases_it_was_pinned_to_when_it_started(
    rollouts: WorkflowHarness,
) -> None:
    event = stamped(rollouts.event(STARTED, "wf-1", workflow_type="procurement"), pins=PINS)
    step = await rollouts.deliver(event)
    assert step.outcome.effects == [RecordPins("wf-1", "procurement", PINS, event.envelope.occurred_at)]
    unpinned = await rollouts.deliver(STARTED, "wf-2")  # no rollout ran when it started
    assert list(unpinned.outcome.effects) == []


async def test_a_workflows_end_is_recorded_with_its_outcome(rollouts: WorkflowHarness) -> None:
    step = await rollouts.deliver(WorkflowEnded(outcome="rejected", ended_by="budget_agent"), "wf-1")
    assert step.outcome.effects == [RecordEnd("wf-1", "rejected", step.event.envelope.occurred_at)]


async def test_a_dead_letter_counts_against_the_failing_release_in_the_workflow_it_stopped(
    rollouts: WorkflowHarness,
) -> None:
    at = datetime(2026, 1, 5, 8, 59, tzinfo=timezone.utc)
    letter = dead_lettered(
        service="invoice_agent", topic="procurement.events", value=b"{}", category="persistent", at=at,
        original_workflow_id="wf-1",
    ).model_copy(update={"service_version": "2.0"})  # fmt: skip
    step = await rollouts.deliver(letter, "wf-1")
    assert step.outcome.effects == [
        RecordFailure(
            step.event.envelope.event_id,
            "wf-1",
            "invoice_agent",
            "2.0",
            "persistent",
            dead_letter=True,
            at=step.event.envelope.occurred_at,
        )
    ]
    # A record that never decoded stopped no workflow: it counts in its letter's own.
    poison = letter.model_copy(update={"original_workflow_id": None})
    [row] = (await rollouts.deliver(poison, "poison:procurement.events:0:7")).outcome.effects
    assert isinstance(row, RecordFailure) and row.workflow_id == "poison:procurement.events:0:7"


async def test_output_that_kept_failing_validation_is_a_semantic_failure_of_its_release(
    rollouts: WorkflowHarness,
) -> None:
    review = example(ReviewRequested).model_copy(update={"service": "invoice_agent"})
    event = stamped(
        rollouts.event(review, "wf-1"), producer=ProducerRef(service="invoice_agent", version="2.0")
    )
    [row] = (await rollouts.deliver(event)).outcome.effects
    assert row == RecordFailure(
        event.envelope.event_id,
        "wf-1",
        "invoice_agent",
        "2.0",
        "semantic",
        dead_letter=False,
        at=event.envelope.occurred_at,
    )


async def test_a_release_report_is_kept_once_by_its_event(rollouts: WorkflowHarness) -> None:
    report = example(ReleaseReported)
    step = await rollouts.deliver(report, "rollout:invoice_agent")
    assert step.outcome.effects == [RecordReport(step.event.envelope.event_id, report)]


async def test_the_owning_releases_answer_to_a_move_is_recorded_against_its_request(
    rollouts: WorkflowHarness,
) -> None:
    request_id = uuid.uuid4()
    answer = example(RepinAnswered).model_copy(update={"request_id": str(request_id)})
    step = await rollouts.deliver(answer, "wf-1")
    assert step.outcome.effects == [
        RecordRepinAnswer(request_id, "wf-1", answer, step.event.envelope.occurred_at)
    ]


async def test_an_answer_naming_no_request_is_refused(rollouts: WorkflowHarness) -> None:
    """A request id that is no event id cannot match a request: a dead letter, not a guess."""
    answer = example(RepinAnswered).model_copy(update={"request_id": "repin-7"})
    with pytest.raises(PersistentError, match="/payload/request_id"):
        await rollouts.deliver(answer, "wf-1")
