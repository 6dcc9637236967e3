"""The intake: one record in, decoded, verified and sent on as a fact, or dead-lettered.

Never raises.

faust-streaming 0.15.3 skips the offset of a record whose agent raised (#527) and
the agent stops; so everything that can fail here is caught and the record goes
to the dead-letter topic with its original bytes before the next one is read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from chorus.base.clock import Clock
from chorus.base.errors import DecodeError, UnauthorizedError
from chorus.base.logs import fields, log_context
from chorus.base.metrics import Metrics
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope, ProducerRef
from chorus.contracts.platform import ErrorCategory, EventDeadLettered
from chorus.contracts.registry import Registry
from chorus.kernel.codec import Event, decode
from chorus.kernel.deadletters import dead_letter_envelope, failure
from chorus.kernel.kafka_records import check_headers
from chorus.kernel.records import Record
from chorus.platform.outcome_analytics.adapters.deadletters import DeadLetterSink
from chorus.platform.outcome_analytics.domain import ACCEPT, Fact, fact_of
from chorus.privacy.signing import Verifier

log = logging.getLogger(__name__)


class FactSink(Protocol):
    """Where the intake sends facts: the view's own topic (keyed by workflow)."""

    async def send(self, fact: Fact) -> None:
        """Returns once the fact is durable (or applied)."""
        ...


@dataclass
class Deps:
    """Everything :func:`on_record` needs, wired once by the app."""

    registry: Registry
    verifier: Verifier
    """Checks signed types as every consumer does: the view counts only what was stated."""
    facts: FactSink
    dead_letters: DeadLetterSink
    metrics: Metrics
    clock: Clock
    producer: ProducerRef
    consumer_group: str
    max_event_bytes: int = 1_048_576
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    """(topic, partition) -> offset of the next record to read (last handled + 1)."""
    handled: int = 0
    """Records handled by this process (a restart resumes: it reads only what is new)."""


async def on_record(record: Record, deps: Deps) -> None:
    """Decode ``record``, send its fact on, or dead-letter it; then note its position.

    Returns after the record is fully handled: its fact or its dead letter acknowledged
    by the broker (which may take as long as the broker is away).
    Only cancellation propagates.
    """
    try:
        await _handle(record, deps)
    except Exception:
        # Only reachable through a bug in the failure path itself. Logged loudly and
        # counted, and the record is skipped: raising would make faust skip it anyway
        # (#527) and stop the agent, leaving an ever staler view behind.
        deps.metrics.failures.labels("unexpected", "unhandled").inc()
        log.exception(
            "record could not be handled nor dead-lettered",
            extra=fields(topic=record.topic, partition=record.partition, offset=record.offset),
        )
    deps.positions[(record.topic, record.partition)] = record.offset + 1
    deps.handled += 1


async def _handle(record: Record, deps: Deps) -> None:
    try:
        check_headers(record.headers)
        event = decode(record.value, deps.registry, accept=ACCEPT, max_bytes=deps.max_event_bytes)
    except DecodeError as exc:
        await _dead_letter(record, exc, "decode", None, deps)
        return
    except Exception as exc:
        # decode() raises DecodeError for bad bytes; anything else is a registry or
        # code mismatch (an event type declared on the topic with no model here).
        await _dead_letter(record, exc, "unexpected", None, deps)
        return
    envelope = event.envelope
    deps.metrics.events_in.labels(record.topic, envelope.event_type).inc()
    try:
        deps.verifier.check(envelope, record.value, record.headers)
    except UnauthorizedError as exc:
        # A forged end or dead letter counts for nothing. Its own letters are signed with
        # its key; one that fails anyway (a key replaced under it) is not lettered again,
        # which would read it back and fail forever.
        if not _is_own_dead_letter(event, deps):
            await _dead_letter(record, exc, "unauthorized", envelope, deps)
        return
    with log_context(
        event_id=str(envelope.event_id),
        workflow_id=envelope.workflow_id,
        event_type=envelope.event_type,
    ):
        try:
            fact = fact_of(envelope, event.payload)
            if fact is not None:
                await deps.facts.send(fact)
        except Exception as exc:
            if _is_own_dead_letter(event, deps):
                # Dead-lettering our own dead letter would put it back on the topic we
                # read, failing again, forever. It already is on the dead-letter topic.
                log.exception("could not count this service's own dead letter; skipped")
                deps.metrics.failures.labels("unexpected", envelope.event_type).inc()
                return
            await _dead_letter(record, exc, "unexpected", envelope, deps)


def _is_own_dead_letter(event: Event[EventModel], deps: Deps) -> bool:
    return (
        isinstance(event.payload, EventDeadLettered)
        and event.envelope.producer.service == deps.producer.service
    )


async def _dead_letter(
    record: Record,
    error: BaseException,
    category: ErrorCategory,
    parent: Envelope | None,
    deps: Deps,
) -> None:
    event_type = parent.event_type if parent else "undecodable"
    deps.metrics.failures.labels(category, event_type).inc()
    now = deps.clock.now()
    # A derived view has no retries: the same bytes fail the same way on every
    # rebuild, so the first failure is the last.
    envelope = dead_letter_envelope(
        record,
        error,
        category,
        producer=deps.producer,
        consumer_group=deps.consumer_group,
        now=now,
        attempts=1,
        failures=[failure(error, 1, now)],
        parent=parent,
    )
    log.warning(
        "record dead-lettered",
        extra=fields(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            category=category,
            error=str(error)[:500],
            dead_letter_id=str(envelope.event_id),
        ),
    )
    await deps.dead_letters.publish(envelope)
    deps.metrics.dead_letters.labels(category).inc()
