"""The timer service: the timer rows its commands write, and what a timer fires.

Timers come here as the runtime publishes them: an approval gate's handler asks for a
window (``ScheduleTimer``), the runtime's messages turn that into a ``timer.schedule`` on
chorus.timers, and the timer service reads it from there. Its handlers return the row
changes as effects; what the rows then do (an existing id wins, only pending timers move,
a workflow's end spares its retries) is SQL, which these tests do not run.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from chorus.contracts.approvals import (
    ApprovalContext,
    ApprovalDecisionSubmitted,
    ApprovalPolicy,
    ApprovalRequested,
    ApprovalWindowElapsed,
    EscalationStep,
)
from chorus.contracts.envelope import ProducerRef
from chorus.contracts.lifecycle import WorkflowEnded
from chorus.contracts.registry import default_registry
from chorus.kernel.codec import Event, decode
from chorus.kernel.messages import Messages
from chorus.kernel.service import Outcome, RescheduleTimer, TimerCommand
from chorus.platform.approval_gate.bootstrap import Deps
from chorus.platform.approval_gate.service import SPEC as GATE
from chorus.platform.timer_service.adapters.repository import (
    CancelTimerRow,
    CancelWorkflowTimers,
    RescheduleTimerRow,
    ScheduleTimerRow,
)
from chorus.platform.timer_service.service import SPEC as TIMERS
from chorus.privacy.signing import Signer, Verifier
from chorus.testing import Step, WorkflowHarness
from tests.support.fakes import InMemoryPolicies

REGISTRY = default_registry()
GATE_KEY = Ed25519PrivateKey.generate()
WINDOW = timedelta(hours=8)
BY_BUDGET = ProducerRef(service="budget_agent", version="0")
"""Who states the requests: the service they are requested by."""
REQUEST = ApprovalRequested(
    approval_id="appr-1",
    requested_by="budget_agent",
    chain=[EscalationStep(tier="manager", window_s=WINDOW.total_seconds())],
    fallback="auto_reject",
    context=ApprovalContext(summary="Invoice INV-1: 1240.00 EUR"),
)
DECIDED = ApprovalDecisionSubmitted(
    approval_id="appr-1", decision="approve", reviewer="dana.manager", reviewer_tier="manager"
)


@pytest.fixture
def gate() -> WorkflowHarness:
    """A service that schedules timers: the approval gate, one window per tier (the
    harness's workflow type declares the request's chain)."""
    return WorkflowHarness(
        GATE, Deps([], "auto_reject", InMemoryPolicies(ApprovalPolicy()), {"test": REQUEST.chain})
    )


@pytest.fixture
def timers() -> WorkflowHarness:
    return WorkflowHarness(TIMERS)


async def published(scheduler: WorkflowHarness, step: Step, *instead: TimerCommand) -> list[Event[Any]]:
    """The timer commands the runtime publishes for ``step``'s timers (or for ``instead``),
    decoded from chorus.timers as the timer service reads them."""
    spec, env = scheduler.spec, step.event.envelope
    producer = ProducerRef(service=spec.name, version=spec.version)
    messages = Messages(spec, REGISTRY, producer, spec.name, Signer(spec.name, GATE_KEY))
    timers = Outcome[Any](timers=instead or step.outcome.timers)
    return [
        decode(row.value, REGISTRY)
        for row in await messages.outcome(env, timers, scheduler.clock.now(), env.traceparent)
    ]


async def rows(timers: WorkflowHarness, commands: list[Event[Any]]) -> list[Any]:
    """The row changes the timer service decides for ``commands``, in order."""
    return [effect for command in commands for effect in (await timers.deliver(command)).outcome.effects]


async def test_a_schedule_keeps_the_timer_for_the_workflow_and_service_that_asked(
    gate: WorkflowHarness, timers: WorkflowHarness
) -> None:
    step = await gate.deliver(REQUEST, "wf-1", producer=BY_BUDGET)
    timers.clock.advance(2)  # the command is read a little later
    [row] = await rows(timers, await published(gate, step))
    assert isinstance(row, ScheduleTimerRow)
    assert row.timer_id == "approval_gate:wf-1:window-appr-1-0"
    assert row.due_at == gate.clock.now() + WINDOW
    assert (row.workflow_id, row.scheduled_by, row.purpose) == ("wf-1", "approval_gate", "escalation")
    assert row.now == timers.clock.now()
    assert timers.state("wf-1") is None  # rows only: the timer service keeps no checkpoint


async def test_a_fire_target_is_the_schedulers_event_in_its_workflow_on_that_events_topic(
    gate: WorkflowHarness, timers: WorkflowHarness
) -> None:
    step = await gate.deliver(REQUEST, "wf-1", producer=BY_BUDGET, priority="high")
    [row] = await rows(timers, await published(gate, step))
    assert isinstance(row, ScheduleTimerRow)
    assert row.topic == REGISTRY.physical_topic(ApprovalWindowElapsed.event_type, "high")
    assert row.key == "wf-1"  # the workflow's partition, behind its earlier events
    value = json.dumps(row.envelope).encode()  # as the firing loop publishes it, verbatim
    fired = decode(value, REGISTRY)
    assert fired.payload == ApprovalWindowElapsed(approval_id="appr-1", level=0)
    env = fired.envelope
    assert (env.workflow_id, env.priority, env.producer.service) == ("wf-1", "high", "approval_gate")
    assert env.causation_id == str(step.event.envelope.event_id)  # the request that opened the window
    assert env.occurred_at == row.due_at  # the window elapsed when it was due, however late it fired
    # The gate's own signature rides along: the timer service relays it and cannot make one.
    assert row.signature is not None
    gate_only = Verifier(REGISTRY.signed_by(), {"approval_gate": GATE_KEY.public_key()})
    gate_only.check(env, value, [("chorus-signature", row.signature.encode())])


async def test_a_step_that_runs_again_asks_for_the_same_timer_once_more(
    gate: WorkflowHarness, timers: WorkflowHarness
) -> None:
    """A step that runs again from the same checkpoint (its first run crashed before the
    commit) publishes the same command (the inbox keeps one copy), for the same timer id
    (the row's key: the first schedule wins) and the same event to fire."""
    request = gate.event(REQUEST, "wf-1", producer=BY_BUDGET)
    rerun = WorkflowHarness(GATE, gate.deps, clock=gate.clock)
    [first] = await published(gate, await gate.deliver(request))
    [again] = await published(rerun, await rerun.deliver(request))
    assert first.envelope.event_id == again.envelope.event_id
    [row], [row_again] = await rows(timers, [first]), await rows(timers, [again])
    assert isinstance(row, ScheduleTimerRow)
    assert row == row_again  # same id, due time and stored envelope (its event id too)


async def test_a_cancel_names_the_timer_of_its_own_workflow_only(
    gate: WorkflowHarness, timers: WorkflowHarness
) -> None:
    """Two workflows wait on the same approval id: deciding one cancels its window alone."""
    [one] = await rows(timers, await published(gate, await gate.deliver(REQUEST, "wf-1", producer=BY_BUDGET)))
    [two] = await rows(timers, await published(gate, await gate.deliver(REQUEST, "wf-2", producer=BY_BUDGET)))
    assert isinstance(one, ScheduleTimerRow) and isinstance(two, ScheduleTimerRow)
    assert one.timer_id != two.timer_id
    timers.clock.advance(600)
    [cancel] = await rows(timers, await published(gate, await gate.deliver(DECIDED, "wf-2")))
    assert cancel == CancelTimerRow(
        timer_id=two.timer_id, reason="decided", workflow_id="wf-2", now=timers.clock.now()
    )


async def test_a_reschedule_moves_that_timer_to_its_new_due_time(
    gate: WorkflowHarness, timers: WorkflowHarness
) -> None:
    step = await gate.deliver(REQUEST, "wf-1", producer=BY_BUDGET)
    [scheduled] = await rows(timers, await published(gate, step))
    assert isinstance(scheduled, ScheduleTimerRow)
    later = scheduled.due_at + timedelta(hours=2)
    moved = RescheduleTimer("window-appr-1-0", later)
    [row] = await rows(timers, await published(gate, step, moved))
    assert row == RescheduleTimerRow(timer_id=scheduled.timer_id, due_at=later, now=timers.clock.now())


async def test_a_workflows_end_cancels_its_pending_timers_and_says_how_it_ended(
    timers: WorkflowHarness,
) -> None:
    ended = WorkflowEnded(outcome="timed_out", reason="deadline passed", ended_by="gateway")
    [row] = (await timers.deliver(ended, "wf-1")).outcome.effects
    assert row == CancelWorkflowTimers("wf-1", "workflow ended (timed_out)", timers.clock.now())
    [other] = (await timers.deliver(ended, "wf-2")).outcome.effects
    assert isinstance(other, CancelWorkflowTimers) and other.workflow_id == "wf-2"
