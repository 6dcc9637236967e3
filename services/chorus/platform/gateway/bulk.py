"""The bulk worker: acts on the pending workflows of bulk actions, one at a time, at each
action's rate (``rate_per_s``), on the service's clock.

Each workflow is acted on in one transaction with its item's new status: the cancel
request (``gateway.cancellations``, one per workflow) and its ``workflow.cancel_requested``,
or the signal (``gateway.signals``, keyed by the action and the workflow) and its event, in
the outbox, and the item ``done``. A workflow that ended meanwhile, was asked to stop
before, or whose type takes no such signal from an operator is ``skipped`` saying so. A
crash (SIGKILL) anywhere leaves the item pending or fully done; the next start goes on with
what is pending. Replicas take disjoint items (``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from chorus.base.errors import EventTooLargeError
from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.kernel.outbox import OutboxTransaction
from chorus.kernel.service import RuntimeHandle
from chorus.platform.gateway.adapters import bulk, repository
from chorus.platform.gateway.adapters.readmodel import ReadModel
from chorus.platform.gateway.routes.events import cancel_in
from chorus.platform.gateway.routes.signals import Signalled, signal_in
from chorus.web.apikeys import bearer
from chorus.web.http import api_client

log = logging.getLogger("chorus.platform.gateway.bulk")

IDLE_S = 1.0
"""How often an idle worker looks for pending items."""


async def _signal(
    tx: OutboxTransaction, rt: RuntimeHandle, item: bulk.Claimed, submission: repository.SubmissionRow | None
) -> tuple[str, str | None]:
    """The action's signal to one workflow, as the operator's (its Idempotency-Key, the
    action's and the workflow's: sent once): (done, the signal's id) or (skipped, why)."""
    assert item.signal is not None and item.input is not None
    declared = rt.registry.signals(item.workflow_type).get(item.signal)
    if declared is None or "operator" not in declared.roles:
        return bulk.SKIPPED, f"a {item.workflow_type} takes no {item.signal} from an operator"
    signalled = Signalled(
        item.workflow_id,
        item.workflow_type,
        submission,
        item.signal,
        rt.registry.latest_model(declared.event),
        item.input,
        item.requested_by,
        f"{item.reason} (bulk action {item.bulk_id})",
    )
    try:
        # A savepoint: a refusal (the input, the event's size) leaves no signal row behind.
        async with tx.conn.transaction():
            row = await signal_in(
                tx,
                rt,
                signalled,
                idempotency_key=f"{item.bulk_id}:{item.workflow_id}",
                request_hash=item.bulk_id,
            )
    except ValidationError as exc:  # its type's event takes the input otherwise than the one checked
        return bulk.SKIPPED, f"its {declared.event} refuses the input: {exc.errors()[0]['msg']}"
    except EventTooLargeError as exc:  # its topic takes less than this workflow's event needs
        return bulk.SKIPPED, str(exc)
    return (bulk.DONE, row.signal_id) if row is not None else (bulk.SKIPPED, "sent before")


async def run_bulk_actions(rt: RuntimeHandle) -> None:
    settings = rt.settings
    headers = bearer(settings.audit_api_key.get_secret_value())
    async with api_client(headers=headers) as client:
        reads = ReadModel(client, settings.audit_url)

        async def round_() -> float:
            async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
                claimed = await bulk.next_batch(conn, 1)
                if not claimed:
                    finished = await bulk.finish_done(conn, rt.clock.now())
                    for bulk_id in finished:
                        log.info("bulk action finished", extra=fields(bulk_id=bulk_id))
                    return IDLE_S
                [item] = claimed
                # What the read model says now: a workflow that ended is not asked to stop.
                view = await reads.workflow(item.workflow_id, for_whom=item.requested_by)
                detail: str | None
                if view is not None and view.outcome is not None:
                    status, detail = bulk.SKIPPED, f"ended ({view.outcome}) before its turn"
                elif item.action == "signal":
                    submission = await repository.find_by_workflow(conn, item.workflow_id)
                    status, detail = await _signal(tx, rt, item, submission)
                else:
                    submission = await repository.find_by_workflow(conn, item.workflow_id)
                    reason = f"{item.reason} (bulk action {item.bulk_id})"
                    request = await cancel_in(
                        tx, rt, item.workflow_id, item.workflow_type, submission, item.requested_by, reason
                    )
                    status, detail = (
                        (bulk.DONE, None)
                        if request is not None
                        else (bulk.SKIPPED, "asked to stop before, by another request")
                    )
                await bulk.settle(conn, item, status, detail, rt.clock.now())
            log.info(
                "bulk item %s",
                status,
                extra=fields(
                    bulk_id=item.bulk_id, workflow_id=item.workflow_id, action=item.action, detail=detail
                ),
            )
            return 1.0 / item.rate_per_s

        await forever("bulk actions", round_, every_s=IDLE_S, sleep=rt.clock.sleep, retry_s=1.0)
