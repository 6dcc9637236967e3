"""Redrive and discard. Each is one transaction: the letter's status change, the
audit row and the messages to publish (outbox), so an operation publishes at most
once however often it is requested, and the relay publishes it at least once.

Redrive puts the original bytes back on the original topic with the same key and
headers; the envelope's ``attempt`` is raised past the failed one, which is what
lets the failing service's inbox take the same event id again.

Discard publishes ``event.discarded`` on the control topic, addressed to the
failing service and consumer group: that runtime marks the event discarded and
releases the workflow that was parked behind it.

A redrive goes back only to a topic the letter's service reads (domain.redrive_refusal),
and an original of a signed type only as its stated producer signed it (the runtime's
verifier); any other is refused and recorded as such, and the letter stays open for a
discard. A letter is anyone's word (any runtime principal may write one): a redrive must
not put on a topic, as the dead-letter service, what its writer could not.
"""

from __future__ import annotations

import base64
import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from chorus.base.errors import UnauthorizedError
from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.contracts.envelope import Envelope
from chorus.contracts.platform import EventDiscarded
from chorus.kernel.envelopes import child_envelope
from chorus.kernel.outbox import OutboxTransaction, outbox_message
from chorus.kernel.service import RuntimeHandle
from chorus.kernel.store import OutboxMessage
from chorus.platform.deadletter_service.adapters import repository as repo
from chorus.platform.deadletter_service.adapters.repository import Letter, OperationRow
from chorus.platform.deadletter_service.domain import (
    MAX_LIMIT,
    LetterFilter,
    Operation,
    TransitionRefusedError,
    redrive_refusal,
    redrive_value,
    resolve,
)

REFUSED = "refused"
IDLE_S = 1.0
"""How often an idle redrive worker looks for operators' requests."""
LETTER_WAIT = timedelta(minutes=10)
"""How long a request that finds no open letter of its workflow waits for one to arrive."""
LETTER_RETRY = timedelta(seconds=5)

log = logging.getLogger("chorus.platform.deadletter_service")


class LetterNotFoundError(LookupError):
    def __init__(self, letter_id: str) -> None:
        super().__init__(f"no dead letter with id {letter_id}")
        self.letter_id = letter_id


class LetterNotOpenError(Exception):
    """The letter was resolved before; nothing was published. ``operation`` is the
    refused attempt as recorded in the audit trail."""

    def __init__(self, letter: Letter, operation: OperationRow, op: str) -> None:
        super().__init__(
            f"dead letter {letter.id} is {letter.status} (by {letter.resolved_by} at "
            f"{letter.resolved_at.isoformat() if letter.resolved_at else '?'}); "
            f"{op} applies to open letters only, so nothing was published"
        )
        self.letter = letter
        self.operation = operation


class RedriveRefusedError(Exception):
    """The letter's original topic is not one its service reads, or its original is of a
    signed type and not signed by who it says stated it; nothing was published, the refusal
    is ``operation`` in the audit trail and the letter stays open."""

    def __init__(self, letter: Letter, operation: OperationRow, why: str) -> None:
        super().__init__(f"dead letter {letter.id} is not redriven: {why}")
        self.letter = letter
        self.operation = operation


@dataclass(frozen=True)
class Done:
    """A letter resolved by one operation, as it is after the commit."""

    letter: Letter
    operation: OperationRow


async def redrive(rt: RuntimeHandle, letter_id: uuid.UUID, *, actor: str, reason: str) -> Done:
    """Publish the letter's original record again, once.

    Raises LetterNotFoundError, or LetterNotOpenError (nothing published) when the
    letter was already redriven or discarded.
    """
    return await _resolve_one(rt, letter_id, "redrive", actor=actor, reason=reason)


async def discard(rt: RuntimeHandle, letter_id: uuid.UUID, *, actor: str, reason: str) -> Done:
    """Give up on the letter and tell its service to stop waiting for it. Same errors."""
    return await _resolve_one(rt, letter_id, "discard", actor=actor, reason=reason)


async def redrive_matching(rt: RuntimeHandle, f: LetterFilter, *, actor: str, reason: str) -> list[Done]:
    """Redrive every open letter matching ``f`` (at most ``f.limit``, oldest first),
    all in one transaction. Letters a concurrent operation holds are left out."""
    async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
        done, _ = await redrive_in(rt, tx, f, actor=actor, reason=reason)
    return done


async def redrive_in(
    rt: RuntimeHandle, tx: OutboxTransaction, f: LetterFilter, *, actor: str, reason: str
) -> tuple[list[Done], int]:
    """:func:`redrive_matching` in the caller's transaction: (the letters redriven, how many
    were refused, each refusal recorded)."""
    now = rt.clock.now()
    done: list[Done] = []
    refused = 0
    for letter in await repo.lock_open_letters(tx.conn, f):
        status = resolve(letter.status, "redrive")
        why = _why_not_redriven(rt, letter)
        if why is not None:
            await _refused(tx.conn, letter, "redrive", actor, reason, now, {"refused": why, "bulk": True})
            refused += 1
            continue
        done.append(
            await _resolved_now(rt, tx.conn, tx, letter, "redrive", status, actor, reason, now, bulk=True)
        )
    return done, refused


async def redrive_requested(rt: RuntimeHandle) -> None:
    """Worker: operators' requests to redrive a workflow's open letters
    (``workflow.redrive_requested``, stated by the gateway for a bulk action's item), each in
    one transaction with its letters' redrives, so a crash leaves it to do or done, once."""

    async def round_() -> float:
        now = rt.clock.now()
        async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
            request = await repo.next_redrive_request(conn, now)
            if request is None:
                return IDLE_S
            f = LetterFilter(workflow_id=request.workflow_id, limit=MAX_LIMIT)
            done, refused = await redrive_in(rt, tx, f, actor=request.requested_by, reason=request.reason)
            if not done and not refused and now - request.requested_at < LETTER_WAIT:
                # The operator saw a dead letter this service has not stored yet (it reads
                # chorus.deadletters at its own pace): look again in a moment.
                await repo.redrive_request_later(conn, request.request_id, now + LETTER_RETRY)
                return 0.0
            await repo.redrive_request_done(conn, request.request_id, now, len(done), refused)
        log.info(
            "redrove a workflow's dead letters for an operator",
            extra=fields(
                workflow_id=request.workflow_id, by=request.requested_by, redriven=len(done), refused=refused
            ),
        )
        return 0.0

    await forever("redrive requests", round_, every_s=IDLE_S, sleep=rt.clock.sleep, retry_s=1.0)


def _why_not_redriven(rt: RuntimeHandle, letter: Letter) -> str | None:
    """Why ``letter`` may not go back to its topic, or None when it may."""
    return redrive_refusal(rt.registry, letter.service, letter.original_topic) or _unsigned(rt, letter)


def _unsigned(rt: RuntimeHandle, letter: Letter) -> str | None:
    """Why the letter's original is not what it claims: an event of a signed type that its
    stated producer did not sign (what its consumer dead-lettered as ``unauthorized``, or a
    forged letter's). Bytes that are no event go back as they were (poison stays poison)."""
    if rt.verifier is None:
        return None
    try:
        original = Envelope.model_validate_json(letter.original_value)
    except ValueError:
        return None
    try:
        rt.verifier.check(original, letter.original_value, _original_headers(letter))
    except UnauthorizedError as exc:
        return f"its original is not signed by who states it ({exc})"
    return None


def _original_headers(letter: Letter) -> list[tuple[str, bytes]]:
    return [
        (h["key"] or "", base64.b64decode(h["value_b64"]) if h["value_b64"] else b"")
        for h in letter.original_headers
    ]


async def _resolve_one(
    rt: RuntimeHandle, letter_id: uuid.UUID, op: Operation, *, actor: str, reason: str
) -> Done:
    now = rt.clock.now()
    async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
        # The row lock serialises concurrent operations on one letter: the second
        # sees the status the first committed and is refused.
        letter = await repo.get_letter(conn, letter_id, for_update=True)
        if letter is None:
            raise LetterNotFoundError(str(letter_id))
        why = _why_not_redriven(rt, letter) if op == "redrive" else None
        outcome: Done | LetterNotOpenError | RedriveRefusedError
        try:
            status = resolve(letter.status, op)
        except TransitionRefusedError:
            refused = await _refused(conn, letter, op, actor, reason, now, {"status": letter.status})
            outcome = LetterNotOpenError(letter, refused, op)
        else:
            if why is not None:
                # Recorded here, raised below: after the commit that keeps the record.
                refused = await _refused(conn, letter, op, actor, reason, now, {"refused": why})
                outcome = RedriveRefusedError(letter, refused, why)
            else:
                outcome = await _resolved_now(rt, conn, tx, letter, op, status, actor, reason, now)
    if not isinstance(outcome, Done):
        raise outcome
    return outcome


async def _resolved_now(
    rt: RuntimeHandle,
    conn: asyncpg.Connection,
    tx: OutboxTransaction,
    letter: Letter,
    op: Operation,
    status: str,
    actor: str,
    reason: str,
    now: datetime,
    *,
    bulk: bool = False,
) -> Done:
    """``op`` applied to the open ``letter``: its messages queued in ``tx``, its status and
    operation written (``bulk``: one of a bulk redrive's)."""
    if op == "redrive":
        message, detail = _redrive_message(letter)
        messages = [message]
    else:
        messages, detail = _discard_outbox(rt, letter, actor, reason, now)
    tx.publish_messages(messages)
    await repo.set_status(conn, letter.id, status, actor, now)
    operation = await repo.add_operation(
        conn, op=op, letter_id=letter.id, actor=actor, reason=reason, at=now, result=status,
        detail={**detail, "bulk": True} if bulk else detail,
    )  # fmt: skip
    return Done(_resolved(letter, status, actor, now), operation)


async def _refused(
    conn: asyncpg.Connection,
    letter: Letter,
    op: Operation,
    actor: str,
    reason: str,
    now: datetime,
    detail: dict[str, Any],
) -> OperationRow:
    """Record a refused ``op`` on ``letter`` in the audit trail (nothing published)."""
    return await repo.add_operation(
        conn, op=op, letter_id=letter.id, actor=actor, reason=reason, at=now, result=REFUSED, detail=detail
    )


def _redrive_message(letter: Letter) -> tuple[OutboxMessage, dict[str, Any]]:
    redriven = redrive_value(letter.original_value, letter.attempts)
    message = OutboxMessage(
        topic=letter.original_topic,
        key=letter.original_key,
        value=redriven.value,
        headers=_original_headers(letter),
        event_id=_uuid(letter.original_event_id),
        workflow_id=letter.original_workflow_id,
    )
    detail = {
        "topic": letter.original_topic,
        "attempt": redriven.attempt,
        "event_id": letter.original_event_id,
        "bytes_unchanged": redriven.attempt is None,
    }
    return message, detail


def _discard_outbox(
    rt: RuntimeHandle, letter: Letter, actor: str, reason: str, now: datetime
) -> tuple[list[OutboxMessage], dict[str, Any]]:
    if letter.original_event_id is None:
        # An undecodable record parks no workflow and has no event id to name;
        # the service has nothing to stop waiting for.
        return [], {"published": False, "why": "the original record was not a decodable event"}
    parent = Envelope.model_validate({**letter.envelope, "payload": {}})
    body = EventDiscarded(
        service=letter.service,
        consumer_group=letter.consumer_group,
        discarded_event_id=letter.original_event_id,
        reason=reason,
        actor=actor,
    )
    # A child of the dead letter: same workflow (which the runtime un-parks), same
    # trace, and an id derived from the letter's, so the discard has one identity.
    envelope = child_envelope(parent, body, producer=rt.producer, now=now, position="discard")
    message = outbox_message(rt.registry, envelope, rt.signer)
    detail = {"published": True, "topic": message.topic, "event_id": str(envelope.event_id)}
    return [message], detail


def _resolved(letter: Letter, status: str, actor: str, now: datetime) -> Letter:
    return replace(letter, status=status, resolved_by=actor, resolved_at=now)


def _uuid(value: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if value is not None else None
    except ValueError:
        return None
