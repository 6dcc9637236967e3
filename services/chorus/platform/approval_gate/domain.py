"""Approval state, escalation decisions and the default approval policy, free of I/O."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel

from chorus.contracts.approvals import (
    ApprovalContext,
    ApprovalPolicy,
    Conditions,
    EscalationStep,
    Fallback,
    PolicyRule,
)
from chorus.contracts.base import Personal

FALLBACK_ACTOR = "chorus:fallback"
POLICY_ACTOR = "chorus:policy"
"""Who refuses an approval that nothing routes."""
DECLARED_FALLBACK: Fallback = "auto_reject"
"""What an unanswered approval routed by its workflow type's declared chain (no rule matched)
comes to: an automatic approval is only ever a policy rule's."""


HOUR = 3600.0
DEFAULT_POLICY = ApprovalPolicy(
    rules=[
        # Large purchases skip the manager: the director decides from the start.
        PolicyRule(
            name="large procurement: director",
            workflow_type="procurement",
            when=Conditions(amount_cents_at_least=1_000_000),
            chain=[EscalationStep(tier="director", window_s=8 * HOUR)],
        ),
        # An invoice the model read with low confidence: a manager checks it, with longer.
        PolicyRule(
            name="uncertain reading: manager reviews first",
            workflow_type="procurement",
            when=Conditions(confidence_below=0.6),
            chain=[
                EscalationStep(tier="manager", window_s=24 * HOUR),
                EscalationStep(tier="director", window_s=8 * HOUR),
            ],
        ),
        # Research output (a draft, or one the model could not get right) is the editors'.
        PolicyRule(
            name="research: editors",
            workflow_type="research_report",
            chain=[EscalationStep(tier="editor", window_s=4 * HOUR)],
        ),
    ]
)
"""Version 1 of the policy table, before anyone changed it."""


class Gate(BaseModel):
    """The workflow's current approval (one at a time; a new round supersedes the old)."""

    approval_id: str
    requested_by: str
    chain: list[EscalationStep]
    fallback: Fallback
    level: int = 0
    status: Literal["pending", "decided", "closed"] = "pending"
    context: Personal[ApprovalContext]
    policy_version: int = 0
    rule: str | None = None
    """The policy rule that routed it (None: the workflow type's declared chain, or the
    gate's own review chain)."""


REVIEW = "review-"
"""How the id of an approval the gate asks for on a service's output (a review) begins."""


def is_review(approval_id: str) -> bool:
    return approval_id.startswith(REVIEW)


def unrouted(workflow_type: str, policy_version: int) -> str:
    """Why an approval was refused: nothing the gate trusts says who decides it."""
    return (
        f"no rule of approval policy version {policy_version} routes a {workflow_type} approval, "
        f"and workflows.yaml declares no approval_chain for {workflow_type}"
    )


def window_timer_id(approval_id: str, level: int) -> str:
    return f"window-{approval_id}-{level}"


def window_end(now: datetime, gate: Gate) -> datetime:
    return now + timedelta(seconds=gate.chain[gate.level].window_s)


def fallback_decision(fallback: Fallback) -> Literal["approve", "reject"]:
    return "approve" if fallback == "auto_approve" else "reject"


def is_current(gate: Gate | None, approval_id: str) -> bool:
    return gate is not None and gate.approval_id == approval_id and gate.status == "pending"
