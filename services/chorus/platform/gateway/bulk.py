"""The bulk worker: acts on the pending workflows of bulk actions, one at a time, at each
action's rate (``rate_per_s``), on the service's clock.

Each workflow is acted on in one transaction with its item's new status, in the outbox:

- cancel: the cancel request (``gateway.cancellations``, one per workflow) and its
  ``workflow.cancel_requested``;
- signal: the signal (``gateway.signals``, keyed by the action and the workflow) and its event;
- reset: the reset (``gateway.resets``, its id derived from the action and the workflow) to
  the workflow's latest event of the type asked, and its ``workflow.reset_requested``, as
  POST /v1/workflows/{id}/reset checks and states it;
- redrive, repin: the operator's request, ``workflow.redrive_requested`` (the dead-letter
  service redrives the letters the workflow waits on) or ``workflow.repin_ordered`` (the
  rollout service checks the move and asks the service's releases, or records its refusal):
  their tables are those services' own, and the request carries the operator's authority as
  the gateway's signed word.

A workflow that ended meanwhile, was asked to stop before, whose type takes no such signal
from an operator, has no such event to go back to (or cannot be reset there), or has no dead
letter to redrive is ``skipped`` saying so. A crash (SIGKILL) anywhere leaves the item
pending or fully done; the next start goes on with what is pending. Replicas take disjoint
items (``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import ValidationError

from chorus.base.errors import EventTooLargeError
from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.contracts.api.audit_projector import WorkflowStatusView
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope
from chorus.contracts.platform import RedriveRequested, bulk_reason
from chorus.contracts.rollouts import RepinOrdered
from chorus.kernel.outbox import OutboxTransaction
from chorus.kernel.service import RuntimeHandle
from chorus.platform.gateway.adapters import bulk, repository
from chorus.platform.gateway.adapters.readmodel import ReadModel
from chorus.platform.gateway.domain import ResetPlan
from chorus.platform.gateway.routes.events import cancel_in, in_workflow
from chorus.platform.gateway.routes.resets import planned, reset_request, timeline_of
from chorus.platform.gateway.routes.signals import Signalled, signal_in
from chorus.web.apikeys import bearer
from chorus.web.http import api_client

log = logging.getLogger("chorus.platform.gateway.bulk")

IDLE_S = 1.0
"""How often an idle worker looks for pending items."""


async def _signal(ctx: _Item) -> tuple[str, str | None]:
    """The action's signal to one workflow, as the operator's (its Idempotency-Key, the
    action's and the workflow's: sent once): (done, the signal's id) or (skipped, why)."""
    tx, rt, item = ctx.tx, ctx.rt, ctx.item
    assert item.signal is not None and item.input is not None
    declared = rt.registry.signals(item.workflow_type).get(item.signal)
    if declared is None or "operator" not in declared.roles:
        return bulk.SKIPPED, f"a {item.workflow_type} takes no {item.signal} from an operator"
    signalled = Signalled(
        item.workflow_id,
        item.workflow_type,
        ctx.submission,
        item.signal,
        rt.registry.latest_model(declared.event),
        item.input,
        item.requested_by,
        ctx.reason,
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


async def _cancel(ctx: _Item) -> tuple[str, str | None]:
    item = ctx.item
    request = await cancel_in(
        ctx.tx, ctx.rt, item.workflow_id, item.workflow_type, ctx.submission, item.requested_by, ctx.reason
    )
    return (
        (bulk.DONE, None)
        if request is not None
        else (bulk.SKIPPED, "asked to stop before, by another request")
    )


async def _reset(ctx: _Item) -> tuple[str, str | None]:
    """The workflow reset to its latest (not undone) event of the type asked, as one
    operator's POST /v1/workflows/{id}/reset would: (done, the reset's id) or (skipped, why)."""
    item = ctx.item
    assert item.reset_to is not None and ctx.view is not None
    timeline = await timeline_of(ctx.reads, item.workflow_id, item.requested_by)
    points = [e for e in timeline if e.event_type == item.reset_to and e.undone_by is None]
    if not points:
        return bulk.SKIPPED, f"no {item.reset_to} in its timeline to go back to"
    plan = planned(ctx.rt, ctx.view, timeline, points[-1].event_id, edit=False)
    if not isinstance(plan, ResetPlan):
        return bulk.SKIPPED, plan[1]
    reset_id = f"rst-{uuid.uuid5(uuid.NAMESPACE_URL, f'chorus:bulk:{item.bulk_id}/{item.workflow_id}').hex}"
    row, envelope = reset_request(
        ctx.rt,
        ctx.view,
        ctx.submission,
        plan,
        reset_id=reset_id,
        requested_by=item.requested_by,
        reason=ctx.reason,
        replacement=None,
        request_hash=item.bulk_id,
        now=ctx.rt.clock.now(),
    )
    try:
        # A savepoint: a reset too large for its topic leaves no row behind, and the item is skipped.
        async with ctx.tx.conn.transaction():
            if await repository.insert_reset(ctx.tx.conn, row):
                await ctx.tx.publish(envelope)
    except EventTooLargeError as exc:
        return bulk.SKIPPED, str(exc)
    return bulk.DONE, reset_id


async def _redrive(ctx: _Item) -> tuple[str, str | None]:
    """The dead-letter service asked to redrive the letters the workflow waits on."""
    assert ctx.view is not None
    if ctx.view.status != "attention":
        return (
            bulk.SKIPPED,
            f"it is {ctx.view.status}: a dead letter is not the latest thing that happened to it",
        )
    item = ctx.item
    asked = RedriveRequested(requested_by=item.requested_by, reason=item.reason, bulk_id=item.bulk_id)
    await ctx.tx.publish(ctx.operation(asked))
    return bulk.DONE, "asked the dead-letter service"


async def _repin(ctx: _Item) -> tuple[str, str | None]:
    """The rollout service asked to move the workflow (it checks, and asks the releases)."""
    item = ctx.item
    assert item.service is not None and item.to_release is not None
    order = RepinOrdered(
        service=item.service,
        to_release=item.to_release,
        requested_by=item.requested_by,
        reason=item.reason,
        bulk_id=item.bulk_id,
    )
    await ctx.tx.publish(ctx.operation(order))
    return bulk.DONE, f"asked the rollout service (GET /v1/rollouts/{item.service}/repins)"


@dataclass(frozen=True)
class _Item:
    """One item's turn: the item, the workflow as the read model shows it, its submission
    here, and the transaction its action commits in."""

    tx: OutboxTransaction
    rt: RuntimeHandle
    reads: ReadModel
    item: bulk.Claimed
    view: WorkflowStatusView | None
    submission: repository.SubmissionRow | None

    @property
    def reason(self) -> str:
        """The operator's reason, naming this bulk action (each workflow's audit trail)."""
        return bulk_reason(self.item.reason, self.item.bulk_id)

    def operation(self, event: EventModel) -> Envelope:
        """``event`` in the workflow, once per action and workflow (its idempotency key)."""
        workflow_type = self.view.workflow_type if self.view is not None else self.item.workflow_type
        key = f"bulk:{self.item.bulk_id}:{self.item.workflow_id}"
        return in_workflow(
            self.rt, event, self.item.workflow_id, workflow_type, self.submission, key, self.rt.clock.now()
        )


ACTIONS: dict[str, Callable[[_Item], Awaitable[tuple[str, str | None]]]] = {
    "cancel": _cancel,
    "signal": _signal,
    "reset": _reset,
    "redrive": _redrive,
    "repin": _repin,
}
"""What each bulk action does to one workflow (the routes check what each one names)."""


async def run_bulk_actions(rt: RuntimeHandle) -> None:
    settings = rt.settings
    headers = bearer(settings.audit_api_key.get_secret_value())
    async with api_client(headers=headers) as client:
        reads = ReadModel(client, settings.audit_url)

        async def round_() -> float:
            async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
                claimed = await bulk.next_batch(conn, 1, list(ACTIONS))
                if not claimed:
                    finished = await bulk.finish_done(conn, rt.clock.now())
                    for bulk_id in finished:
                        log.info("bulk action finished", extra=fields(bulk_id=bulk_id))
                    return IDLE_S
                [item] = claimed
                # What the read model says now: a workflow that ended is not acted on.
                view = await reads.workflow(item.workflow_id, for_whom=item.requested_by)
                detail: str | None
                if view is not None and view.outcome is not None:
                    status, detail = bulk.SKIPPED, f"ended ({view.outcome}) before its turn"
                elif view is None and item.action in ("reset", "redrive"):
                    status, detail = bulk.SKIPPED, "not started yet"
                else:
                    submission = await repository.find_by_workflow(conn, item.workflow_id)
                    status, detail = await ACTIONS[item.action](_Item(tx, rt, reads, item, view, submission))
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
