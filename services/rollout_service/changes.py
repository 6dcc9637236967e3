"""Making a change: the policy, its history row and its ``rollout.changed`` commit in one
transaction (the outbox publishes the event; every process follows it). The operator API
and the automatic-rollback rule both change policies through here."""

from __future__ import annotations

import logging
from datetime import datetime

import asyncpg

from chorus.envelopes import start_envelope
from chorus.logs import fields
from chorus.rollouts import ROLLOUT_WORKFLOW_TYPE, rollout_workflow_id
from chorus.service import RuntimeHandle
from chorus_contracts.rollouts import RolloutChanged
from rollout_service.adapters import repository as repo
from rollout_service.domain import Change, ChangeRefused, apply_change

log = logging.getLogger("rollout_service.changes")


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
            revision=changed.revision,
            action=changed.action,
            stable=changed.stable,
            canary=changed.canary,
            percent=changed.percent,
            by=changed.changed_by,
            reason=changed.reason,
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
