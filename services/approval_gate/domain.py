"""Approval state and escalation decisions, free of I/O."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel

from chorus_contracts.approvals import ApprovalContext, EscalationStep, Fallback

FALLBACK_ACTOR = "chorus:fallback"


class Gate(BaseModel):
    """The workflow's current approval (one at a time; a new round supersedes the old)."""

    approval_id: str
    requested_by: str
    chain: list[EscalationStep]
    fallback: Fallback
    level: int = 0
    status: Literal["pending", "decided", "closed"] = "pending"
    context: ApprovalContext


def window_timer_id(approval_id: str, level: int) -> str:
    return f"window-{approval_id}-{level}"


def window_end(now: datetime, gate: Gate) -> datetime:
    return now + timedelta(seconds=gate.chain[gate.level].window_s)


def fallback_decision(fallback: Fallback) -> Literal["approve", "reject"]:
    return "approve" if fallback == "auto_approve" else "reject"


def is_current(gate: Gate | None, approval_id: str) -> bool:
    return gate is not None and gate.approval_id == approval_id and gate.status == "pending"
