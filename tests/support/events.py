"""Event types that exist only in tests, on the test-only topic ``test.tasks``; and the
platform's events that many tests build alike (a decision, a dead letter), said once."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Literal

from chorus.contracts.approvals import ApprovalDecided, Decision
from chorus.contracts.base import EventModel, event
from chorus.contracts.platform import ErrorCategory, ErrorDetail, EventDeadLettered, Failure, OriginalRecord


@event("test.task_submitted", 1)
class TaskSubmitted(EventModel):
    task: str
    mode: Literal[
        "ok",
        "persistent",
        "semantic",
        "slow",
        "unexpected",
        "steps",
        "nul_state",
        "note",
        "huge_emit",
        "call",
        "remind",
        "progress",
    ] = "ok"
    transient_failures: int = 0
    """The handler raises TransientError on attempts 1..transient_failures."""
    sleep_s: float = 0.0
    note: str = ""
    """mode note: written to the service's notes table (varchar(64)) in the step's transaction."""
    url: str = ""
    """mode call: a submitter's URL the handler calls (a callback, a source)."""
    # mode remind: schedules a reminder (this event again, task "reminded") an hour later.


@event("test.task_done", 1)
class TaskDone(EventModel):
    task: str
    attempt: int
    handled_count: int


TEST_TOPIC_YAML = """\
topic: test.tasks
description: Test-only work items.
owner: test_service
producers: [test_service]
consumers: [test_service]
partitions: 3
retention_ms: 3600000
cleanup_policy: delete
message_key: workflow_id
lanes: true
events:
  - type: test.task_submitted
    versions: [1]
    compatibility: full
  - type: test.task_done
    versions: [1]
    compatibility: full
"""


def dead_lettered(
    *,
    service: str,
    topic: str,
    value: bytes,
    category: ErrorCategory,
    at: datetime,
    key: bytes | None = None,
    partition: int = 0,
    offset: int = 7,
    error_class: str = "Boom",
    message: str = "boom",
    attempts: int = 1,
    **about_original: str | None,
) -> EventDeadLettered:
    """The payload the runtime of ``service`` publishes for a record it gave up on (the
    last failure at ``at``); ``about_original`` sets original_event_type / _id /
    _workflow_id."""
    return EventDeadLettered(
        service=service,
        service_version="1",
        consumer_group=service,
        original=OriginalRecord(
            topic=topic,
            partition=partition,
            offset=offset,
            key_b64=base64.b64encode(key).decode() if key is not None else None,
            value_b64=base64.b64encode(value).decode(),
        ),
        error=ErrorDetail(category=category, error_class=error_class, message=message),
        attempts=attempts,
        failures=[Failure(at=at, attempt=attempts, error_class=error_class, message=message)],
        **about_original,
    )


def approval_decided(
    decision: Decision = "approve",
    *,
    approval_id: str = "appr-1",
    decided_by: str = "dana.manager",
    tier: str = "manager",
    requested_by: str = "budget_agent",
    comment: str = "",
    automatic: bool = False,
) -> ApprovalDecided:
    """The approval gate's decision on an approval: by default the procurement flow's usual
    one, a manager approving the payment the budget agent asked about. A test names only
    what its case changes."""
    return ApprovalDecided(
        approval_id=approval_id,
        decision=decision,
        comment=comment,
        decided_by=decided_by,
        tier=tier,
        automatic=automatic,
        requested_by=requested_by,
    )
