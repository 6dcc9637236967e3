"""Bounded parking: a workflow that waits behind a dead letter longer than
``parked_alert_after_s`` raises ``workflow.attention_needed`` (once per dead letter) and
counts in ``chorus_workflows_parked_too_long``. The projector sees every workflow, so it
is the one to notice; the alert goes onto workflows.lifecycle for whoever pages people,
and comes back into the projection (the workflow's ``attention.alerted_at``). The
workflow's own deadline still ends it."""

from __future__ import annotations

import logging
import uuid

from chorus.base.logs import fields
from chorus.base.loops import forever
from chorus.contracts.lifecycle import WorkflowAttentionNeeded
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.service import RuntimeHandle
from chorus.platform.audit_projector.adapters import queries
from chorus.platform.audit_projector.config import Settings
from chorus.platform.audit_projector.domain import ATTENTION

log = logging.getLogger("chorus.platform.audit_projector.attention")


async def alert_parked_workflows(rt: RuntimeHandle) -> None:
    """One look every ``attention_check_s`` of the clock's time."""
    settings = rt.settings if isinstance(rt.settings, Settings) else Settings()
    parked = rt.metrics.gauge(
        "chorus_workflows_parked_too_long",
        "Workflows waiting behind a dead letter longer than parked_alert_after_s (alert when above 0)",
    )

    async def look() -> None:
        now = rt.clock.now()
        async with rt.pool.acquire() as conn:
            page = await queries.list_workflows(
                conn,
                queries.WorkflowFilter(statuses=(ATTENTION,)),
                order=queries.Order.QUIETEST,
                limit=10_000,
                schema=rt.service,
            )
        overdue = [
            w
            for w in page.workflows
            if w.attention is not None
            and (now - w.attention.since).total_seconds() >= settings.parked_alert_after_s
        ]
        parked.set(len(overdue))
        for workflow in overdue:
            why = workflow.attention
            assert why is not None
            if why.alerted_at is not None:
                continue
            alert = WorkflowAttentionNeeded(
                since=why.since,
                waited_s=(now - why.since).total_seconds(),
                why=why.why[:4000],
                dead_letter_event_id=why.dead_letter_event_id,
            )
            key = f"attention:{workflow.workflow_id}:{why.dead_letter_event_id}"
            envelope = start_envelope(
                alert,
                workflow_id=workflow.workflow_id,
                workflow_type=workflow.workflow_type,
                producer=rt.producer,
                now=now,
                idempotency_key=key,
                # The same alert twice (a look before the first came back) is one event.
                event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"chorus:{key}"),
            )
            async with rt.pool.acquire() as conn, rt.outbox.transaction(conn) as tx:
                await tx.publish(envelope)
            log.warning(
                "workflow parked behind a dead letter too long",
                extra=fields(workflow_id=workflow.workflow_id, since=why.since.isoformat(), why=why.why),
            )

    await forever("attention", look, every_s=settings.attention_check_s, sleep=rt.clock.sleep)
