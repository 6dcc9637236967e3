"""The approval gate's escalation windows, decided by its handlers alone."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

from chorus.base.clock import ManualClock
from chorus.contracts.approvals import ApprovalEscalated, ApprovalPolicy
from chorus.contracts.registry import default_registry
from chorus.kernel.codec import decode
from chorus.kernel.service import Context, ScheduleTimer
from chorus.platform.approval_gate.bootstrap import Deps, approval_chains
from chorus.platform.approval_gate.handlers import on_approval_requested, on_approval_window_elapsed
from tests.support.fakes import InMemoryPolicies


def _ctx(event: Any, clock: ManualClock) -> Context[Any]:
    async def no_checkpoint(_: Any, __: Any) -> None:
        raise AssertionError("the gate does not checkpoint mid-handler")

    return Context(
        service="approval_gate",
        deps=Deps([], "auto_reject", InMemoryPolicies(ApprovalPolicy()), approval_chains(default_registry())),
        clock=clock,
        envelope=event.envelope,
        attempt=1,
        feedback=[],
        log=logging.LoggerAdapter(logging.getLogger("test")),
        _checkpoint=no_checkpoint,
    )


async def test_the_first_window_runs_from_when_the_gate_routes_it_whatever_time_the_request_states() -> None:
    """A request that says it is nine hours old (a gate that was down, or a requester that
    backdates it to skip the manager) still gives the manager the whole window."""
    registry = default_registry()
    raw = registry.examples[("approval.requested", 1)][0].body
    requested = decode(json.dumps(raw).encode(), registry)
    requested_at = requested.envelope.occurred_at
    clock = ManualClock(requested_at + timedelta(hours=9))

    outcome = await on_approval_requested(requested, None, _ctx(requested, clock))  # type: ignore[arg-type]
    assert outcome.state is not None
    window = timedelta(seconds=outcome.state.chain[0].window_s)  # the chain it was routed by
    (timer,) = [t for t in outcome.timers if isinstance(t, ScheduleTimer)]
    assert timer.due_at == clock.now() + window  # not requested_at + window, long past
    clock.advance(window.total_seconds())  # the manager's window runs out

    elapsed_raw = {
        **raw,
        "event_id": "6f1c2a3e-0000-4000-8000-000000000001",
        "event_type": "approval.window_elapsed",
        "payload": {"approval_id": requested.payload.approval_id, "level": 0},  # type: ignore[attr-defined]
    }
    elapsed = decode(json.dumps(elapsed_raw).encode(), registry)
    escalated = await on_approval_window_elapsed(elapsed, outcome.state, _ctx(elapsed, clock))  # type: ignore[arg-type]
    (next_timer,) = [t for t in escalated.timers if isinstance(t, ScheduleTimer)]
    # The director is told now, so the director's whole window starts now.
    director_window = timedelta(seconds=outcome.state.chain[1].window_s)
    assert next_timer.due_at == clock.now() + director_window
    (notice,) = escalated.emit
    assert isinstance(notice, ApprovalEscalated) and notice.waiting_until == next_timer.due_at
