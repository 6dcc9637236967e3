"""Human approval gates with escalation chains, shared by every workflow type."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from chorus_contracts.base import Comment, EventModel, Model, Name, Ref, Text, UtcDateTime, event

Decision = Literal["approve", "reject", "revise"]
Fallback = Literal["auto_reject", "auto_approve"]


class EscalationStep(Model):
    tier: Name = Field(description="reviewer tier that may decide at this step, e.g. 'manager'")
    window_s: float = Field(gt=0, le=366 * 86400, description="how long this tier has before escalation")


class ApprovalContext(Model):
    """What a reviewer needs to decide without opening another system."""

    summary: Text
    inputs: dict[str, Any] = Field(default={}, max_length=100)
    steps_taken: list[Text] = Field(default=[], max_length=100)
    options: list[Decision] = Field(default=["approve", "reject", "revise"], max_length=3)
    why: Text = Field(default="", description="why a person is asked (policy, threshold, escalation)")


@event("approval.requested", 1)
class ApprovalRequested(EventModel):
    """A workflow pauses here until a person decides (no compute runs while it waits)."""

    approval_id: Ref
    requested_by: Name
    chain: list[EscalationStep] = Field(min_length=1, max_length=10)
    fallback: Fallback = "auto_reject"
    context: ApprovalContext


@event("approval.escalated", 1)
class ApprovalEscalated(EventModel):
    approval_id: Ref
    level: int = Field(ge=1, le=10, description="index in the chain now responsible (0 is the first)")
    from_tier: Name
    to_tier: Name
    waiting_until: UtcDateTime


@event("approval.window_elapsed", 1)
class ApprovalWindowElapsed(EventModel):
    """Timer: the tier at ``level`` did not answer within its window."""

    approval_id: Ref
    level: int = Field(ge=0, le=10)


@event("approval.decision_submitted", 1)
class ApprovalDecisionSubmitted(EventModel):
    """Command from the gateway: a reviewer answered. The gate checks and decides."""

    approval_id: Ref
    decision: Decision
    comment: Comment = ""
    reviewer: Name
    reviewer_tier: Name


@event("approval.decided", 1)
class ApprovalDecided(EventModel):
    approval_id: Ref
    decision: Decision
    comment: Comment = ""
    decided_by: Name = Field(description="reviewer identity, or 'chorus:fallback' when automatic")
    tier: str = Field(max_length=200)
    automatic: bool = False
    requested_by: Name = Field(description="the service that asked; it resumes the workflow")
