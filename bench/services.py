"""The Chorus services measured by the bench, built on the real runtime.

- ``bench_noop``: handler does no work; it emits one event (R2, R4).
- ``bench_signed_noop``: the same with both events signed: it checks the driver's signature
  of each input and signs its output (the cost of signing everything).
- ``bench_durable``: handler changes the workflow's state (R3): inbox + checkpoint
  + outbox in one transaction.
- ``bench_flow``: a 5-step workflow, one state change and one Kafka hop per step (R5).
- ``bench_sealed_flow``: the same workflow with a personal field in every event: each step
  opens it (``personal=True``) and the runtime seals it again in what the step emits (R5
  with encryption on).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from bench.events import (
    SEALED_FLOW,
    SIGNED_NOOP,
    DurablePing,
    DurablePong,
    FlowDone,
    FlowStep,
    NoopPing,
    NoopPong,
    SealedDone,
    SealedStep,
    SignedPing,
    SignedPong,
)
from chorus.kernel.codec import Event
from chorus.kernel.service import Context, On, Outcome, ServiceSpec

FLOW_STEPS = 5


class Handled(BaseModel):
    count: int = 0
    last_seq: int = -1


class FlowState(BaseModel):
    step: int = 0


async def on_noop_ping(event: Event[NoopPing], state: None, ctx: Context[Any]) -> Outcome[BaseModel]:
    p = event.payload
    return Outcome(emit=[NoopPong(seq=p.seq, sent_ns=p.sent_ns, pad=p.pad)])


async def on_signed_ping(event: Event[SignedPing], state: None, ctx: Context[Any]) -> Outcome[BaseModel]:
    p = event.payload
    return Outcome(emit=[SignedPong(seq=p.seq, sent_ns=p.sent_ns, pad=p.pad)])


async def on_durable_ping(
    event: Event[DurablePing], state: Handled | None, ctx: Context[Any]
) -> Outcome[Handled]:
    p = event.payload
    count = state.count + 1 if state else 1
    return Outcome(
        state=Handled(count=count, last_seq=p.seq),
        emit=[DurablePong(seq=p.seq, sent_ns=p.sent_ns, pad=p.pad)],
    )


async def on_flow_step(
    event: Event[FlowStep], state: FlowState | None, ctx: Context[Any]
) -> Outcome[FlowState]:
    p = event.payload
    if p.step < FLOW_STEPS:
        nxt: FlowStep | FlowDone = FlowStep(step=p.step + 1, started_ns=p.started_ns, pad=p.pad)
    else:
        nxt = FlowDone(steps=p.step, started_ns=p.started_ns)
    return Outcome(
        state=FlowState(step=p.step),
        emit=[nxt],
        ended="completed" if p.step >= FLOW_STEPS else None,
    )


async def on_sealed_step(
    event: Event[SealedStep], state: FlowState | None, ctx: Context[Any]
) -> Outcome[FlowState]:
    p = event.payload  # the note arrives opened (personal=True); the runtime seals it on the way out
    if p.step < FLOW_STEPS:
        nxt: SealedStep | SealedDone = SealedStep(
            step=p.step + 1, started_ns=p.started_ns, note=p.note, pad=p.pad
        )
    else:
        nxt = SealedDone(steps=p.step, started_ns=p.started_ns, note=p.note)
    return Outcome(
        state=FlowState(step=p.step),
        emit=[nxt],
        ended="completed" if p.step >= FLOW_STEPS else None,
    )


SPECS: dict[str, ServiceSpec[Any, Any]] = {
    "noop": ServiceSpec(
        name="bench_noop",
        version="0",
        handlers=[On(NoopPing, on_noop_ping, timeout_s=30)],
        produces=frozenset({"bench.noop_pong"}),
    ),
    "signed_noop": ServiceSpec(
        name=SIGNED_NOOP,
        version="0",
        handlers=[On(SignedPing, on_signed_ping, timeout_s=30)],
        produces=frozenset({"bench.signed_pong"}),
    ),
    "durable": ServiceSpec(
        name="bench_durable",
        version="0",
        handlers=[On(DurablePing, on_durable_ping, timeout_s=30)],
        produces=frozenset({"bench.durable_pong"}),
        state=Handled,
    ),
    "flow": ServiceSpec(
        name="bench_flow",
        version="0",
        handlers=[On(FlowStep, on_flow_step, timeout_s=30)],
        produces=frozenset({"bench.step", "bench.flow_done"}),
        state=FlowState,
    ),
    "sealed_flow": ServiceSpec(
        name=SEALED_FLOW,
        version="0",
        handlers=[On(SealedStep, on_sealed_step, timeout_s=30, personal=True)],
        produces=frozenset({"bench.sealed_step", "bench.sealed_done"}),
        state=FlowState,
    ),
}
