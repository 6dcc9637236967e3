"""Making a change: the policy, its history row and its ``rollout.changed`` commit in one
transaction (the outbox publishes the event; every process follows it). The operator API
and the automatic-rollback rule both change policies through here. Asking for a workflow
to move to another release: its audit row and the request, likewise."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

import asyncpg

from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.contracts.rollouts import RolloutChanged
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.outbox import OutboxTransaction
from chorus.kernel.service import RuntimeHandle
from chorus.platform.rollout_service.adapters import repository as repo
from chorus.platform.rollout_service.domain import Change, ChangeRefused, apply_change, repin_request
from chorus.releases.rollouts import ROLLOUT_WORKFLOW_TYPE, rollout_workflow_id

log = logging.getLogger("chorus.platform.rollout_service.changes")

IDLE_S = 1.0
"""How often an idle worker looks for operators' orders to move a workflow."""
PIN_WAIT = timedelta(minutes=10)
"""How long an order for a workflow not known here yet waits for its start to arrive."""
PIN_RETRY = timedelta(seconds=5)


async def make_change(rt: RuntimeHandle, service: str, change: Change) -> RolloutChanged:
    """Apply ``change`` to the service's policy (ChangeRefused when it does not apply)."""
    now = rt.clock.now()
    try:
        changed = await _commit(rt, service, change, now)
    except asyncpg.UniqueViolationError:
        # A service's first change has no policy row to lock: two at once both build
        # revision 1, and the history's key lets one of them through.
        raise ChangeRefused(409, f"{service}'s rollout changed at the same moment; look again") from None
    log.warning(
        "rollout changed",
        extra=fields(
            rollout_of=service,
            by=changed.changed_by,
            # The rest under the event's own names.
            **changed.model_dump(include={"revision", "action", "stable", "canary", "percent", "reason"}),
        ),
    )
    return changed


async def _commit(rt: RuntimeHandle, service: str, change: Change, now: datetime) -> RolloutChanged:
    async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
        current = await repo.policy(conn, service, lock=True)
        changed = apply_change(service, current, change)
        await repo.save_policy(conn, changed, now)
        await tx.publish(
            start_envelope(
                changed,
                workflow_id=rollout_workflow_id(service),
                workflow_type=ROLLOUT_WORKFLOW_TYPE,
                producer=rt.producer,
                now=now,
                idempotency_key=f"{rollout_workflow_id(service)}:{changed.revision}",
            )
        )
    return changed


async def request_repin(
    rt: RuntimeHandle, service: str, workflow_id: str, to: str, actor: str, reason: str
) -> uuid.UUID:
    """Ask the release that owns the workflow to move it to ``to`` (ChangeRefused when that
    cannot apply); the answer comes back as ``workflow.repin_answered``."""
    async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
        # Every request through the API is its own.
        return await repin_in(rt, tx, service, workflow_id, to, actor, reason, key=f"repin:{uuid.uuid4()}")


async def repin_in(
    rt: RuntimeHandle,
    tx: OutboxTransaction,
    service: str,
    workflow_id: str,
    to: str,
    actor: str,
    reason: str,
    *,
    key: str,
) -> uuid.UUID:
    """:func:`request_repin` in the caller's transaction, its request's idempotency ``key``
    given: its event id."""
    now = rt.clock.now()
    current = await repo.policy(tx.conn, service)
    found = await repo.assignment(tx.conn, service, workflow_id)
    if found is None:
        raise ChangeRefused(
            404, f"no workflow {workflow_id!r} was pinned at {service} when it started; nothing to move"
        )
    request = repin_request(service, current, found.release, found.ended, to, actor, reason)
    envelope = start_envelope(
        request,
        workflow_id=workflow_id,
        workflow_type=found.workflow_type,
        producer=rt.producer,
        now=now,
        idempotency_key=key,
    )
    await repo.add_repin(tx.conn, envelope.event_id, request, workflow_id=workflow_id, at=now)
    await tx.publish(envelope)
    log.warning(
        "asked to move a workflow to another release",
        extra=fields(rollout_of=service, workflow_id=workflow_id, to_release=to, by=actor, reason=reason),
    )
    return envelope.event_id


async def repin_ordered(rt: RuntimeHandle) -> None:
    """Worker: operators' orders to move a workflow (``workflow.repin_ordered``, stated by the
    gateway for a bulk action's item), each checked and asked for (or refused, in the moves'
    audit) in one transaction with the order, so a crash leaves it to do or done, once."""

    async def round_() -> float:
        now = rt.clock.now()
        async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
            order = await repo.next_repin_order(conn, now)
            if order is None:
                return IDLE_S
            try:
                await repin_in(
                    rt,
                    tx,
                    order.service,
                    order.workflow_id,
                    order.to_release,
                    order.requested_by,
                    order.reason,
                    key=f"repin:{order.order_id}",
                )
            except ChangeRefused as exc:
                if exc.status == 404 and now - order.ordered_at < PIN_WAIT:
                    # Where the workflow started comes from workflows.lifecycle, read at this
                    # service's own pace: a workflow the gateway found may not be here yet.
                    await repo.repin_order_later(conn, order.order_id, now + PIN_RETRY)
                    return 0.0
                await repo.refused_repin(conn, order, exc.message, rt.service, now)
                log.warning(
                    "an operator's order to move a workflow was refused",
                    extra=fields(rollout_of=order.service, workflow_id=order.workflow_id, why=exc.message),
                )
            await repo.repin_order_done(conn, order.order_id, now)
        return 0.0

    await forever("repin orders", round_, every_s=IDLE_S, sleep=rt.clock.sleep, retry_s=1.0)
