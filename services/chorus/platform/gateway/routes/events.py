"""Events a person's request adds to a running workflow (a cancel, a decision): in its
trace and its priority lane."""

from __future__ import annotations

import json
from datetime import datetime

from chorus.base.tracing import request_span
from chorus.contracts.base import EventModel
from chorus.contracts.envelope import Envelope, Priority
from chorus.kernel.envelopes import start_envelope
from chorus.kernel.service import RuntimeHandle
from chorus.platform.gateway.adapters import repository


def in_workflow(
    rt: RuntimeHandle,
    event: EventModel,
    workflow_id: str,
    workflow_type: str,
    submission: repository.SubmissionRow | None,
    idempotency_key: str,
    now: datetime,
) -> Envelope:
    """An event a person's request adds to a running workflow: in its trace (a span of the
    gateway's, the request's) and its priority lane."""
    priority: Priority = "normal"
    if submission is not None and submission.priority in ("high", "normal", "low"):
        priority = submission.priority  # type: ignore[assignment]
    with request_span("gateway", event.event_type, submission.traceparent if submission else None) as current:
        return start_envelope(
            event,
            workflow_id=workflow_id,
            workflow_type=workflow_type,
            producer=rt.producer,
            now=now,
            idempotency_key=idempotency_key,
            correlation_id=workflow_id,
            pins=json.loads(submission.pins) if submission is not None and submission.pins else None,
            traceparent=current,
            priority=priority,
        )
