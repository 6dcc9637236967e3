"""Event types and topics that exist only in benchmarks (registered like tests/support/events.py).

Each measured service gets its own input and output topic, so that a backlog
preloaded for one variant is never read by another one's consumer group.
"""

from __future__ import annotations

from chorus.contracts.base import EventModel, Personal, Text, event


class _Hop(EventModel):
    seq: int
    sent_ns: int
    """bench.kafkaio.run_ns() at the driver when the input was produced (latency)."""
    pad: str = ""
    """Filler that brings the whole envelope to about 1 KB."""


@event("bench.noop_ping", 1)
class NoopPing(_Hop):
    pass


@event("bench.noop_pong", 1)
class NoopPong(_Hop):
    pass


@event("bench.durable_ping", 1)
class DurablePing(_Hop):
    pass


@event("bench.durable_pong", 1)
class DurablePong(_Hop):
    pass


@event("bench.signed_ping", 1)
class SignedPing(_Hop):
    """The no-op hop with both events signed (signed_by): the cost of signing everything."""


@event("bench.signed_pong", 1)
class SignedPong(_Hop):
    pass


@event("bench.step", 1)
class FlowStep(EventModel):
    step: int
    started_ns: int
    pad: str = ""


@event("bench.flow_done", 1)
class FlowDone(EventModel):
    steps: int
    started_ns: int


@event("bench.sealed_step", 1)
class SealedStep(EventModel):
    """A step of the sealed flow (R5 with encryption on): a flow step carrying personal data."""

    step: int
    started_ns: int
    note: Personal[Text]
    """A data subject's contact details and request (see NOTE): sealed on every topic."""
    pad: str = ""


@event("bench.sealed_done", 1)
class SealedDone(EventModel):
    """The end of a sealed flow. It carries the note too, so that every step of the five
    opens one sealed value and seals one, as a step that passes personal data on does."""

    steps: int
    started_ns: int
    note: Personal[Text]


NOTE = (
    "Jane Doe (jane.doe@example.com, +44 20 7946 0000), 221B Baker Street, London NW1 6XE: "
    "delivery damaged, refund to GB33BUKB20201555555555"
)
"""The sealed flow's personal field: about the size of a submission's contact block (name,
e-mail, phone, address, account). Sealed, it still fits the bench's ~1 KB records."""


@event("bench.timer_fired", 1)
class TimerFired(EventModel):
    due_ns: int


DRIVER_SIGNER = "bench_driver"
SIGNED_NOOP = "bench_signed_noop"
SEALED_FLOW = "bench_sealed_flow"


def _topic(name: str, *event_types: str, signed_by: str = "", service: str = "") -> str:
    """A bench topic's file. ``service``: a bench service named as its producer and consumer,
    for the registry to know what it reads and writes (a service that handles personal fields
    gets data keys only then: Registry.handles_personal)."""
    signer = f"    signed_by: {signed_by}\n" if signed_by else ""
    also = f", {service}" if service else ""
    events = "".join(
        f"  - type: {t}\n    versions: [1]\n    compatibility: full\n{signer}" for t in event_types
    )
    return (
        f"topic: {name}\n"
        "description: Benchmark-only topic (bench/).\n"
        "owner: bench\n"
        f"producers: [{signed_by or 'bench'}{also}]\n"
        f"consumers: [bench{also}]\n"
        "partitions: 6\n"
        "retention_ms: 3600000\n"
        "cleanup_policy: delete\n"
        "message_key: workflow_id\n"
        f"events:\n{events}"
    )


BENCH_TOPICS: dict[str, str] = {
    "bench.noop.in": _topic("bench.noop.in", "bench.noop_ping"),
    "bench.noop.out": _topic("bench.noop.out", "bench.noop_pong"),
    "bench.durable.in": _topic("bench.durable.in", "bench.durable_ping"),
    "bench.durable.out": _topic("bench.durable.out", "bench.durable_pong"),
    # The driver states the pings (with its key), the signed no-op service its pongs.
    "bench.signed.in": _topic("bench.signed.in", "bench.signed_ping", signed_by=DRIVER_SIGNER),
    "bench.signed.out": _topic("bench.signed.out", "bench.signed_pong", signed_by=SIGNED_NOOP),
    "bench.steps": _topic("bench.steps", "bench.step"),
    "bench.done": _topic("bench.done", "bench.flow_done"),
    # The sealed flow's: it needs data keys, so the registry must know it reads and writes them.
    "bench.sealed.steps": _topic("bench.sealed.steps", "bench.sealed_step", service=SEALED_FLOW),
    "bench.sealed.done": _topic("bench.sealed.done", "bench.sealed_done", service=SEALED_FLOW),
    "bench.fired": _topic("bench.fired", "bench.timer_fired"),
}
