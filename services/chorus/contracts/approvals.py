"""Human approval gates with escalation chains, shared by every workflow type."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from chorus.contracts.base import Comment, EventModel, Model, Name, Personal, Ref, Text, UtcDateTime, event

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


class ApprovalFacts(Model):
    """What the approval policy may route on (chain and fallback by amount, unit, risk)."""

    amount_cents: int | None = Field(default=None, ge=0)
    business_unit: Name | None = Field(default=None, description="e.g. the cost center")
    confidence: float | None = Field(default=None, ge=0, le=1, description="the model's, when an LLM read it")
    risk_flags: list[Name] = Field(default=[], max_length=20, description="e.g. 'new_vendor'")


@event("approval.requested", 1)
class ApprovalRequested(EventModel):
    """A workflow pauses here until a person decides (no compute runs while it waits).
    ``chain`` and ``fallback`` are what the requester proposes, for the record: the gate
    routes by its approval policy and the workflow type's declared chain (approval.routed
    says how)."""

    approval_id: Ref
    requested_by: Name
    chain: list[EscalationStep] = Field(min_length=1, max_length=10)
    fallback: Fallback = "auto_reject"
    context: Personal[ApprovalContext]
    facts: ApprovalFacts = Field(default=ApprovalFacts(), description="what the policy routes on")


@event("approval.routed", 1)
class ApprovalRouted(EventModel):
    """The chain and fallback that decide this approval: the policy's (``rule``, at
    ``policy_version``), or the workflow type's declared chain when no rule matched
    (``rule`` null)."""

    approval_id: Ref
    chain: list[EscalationStep] = Field(min_length=1, max_length=10)
    fallback: Fallback
    policy_version: int = Field(ge=0)
    rule: Name | None = None


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
    comment: Personal[Comment] = ""
    reviewer: Personal[Name]
    reviewer_tier: Name


NO_TIER = "none"
"""The ``tier`` of an approval.decided no tier decided: the gate refused the request, because
nothing it trusts routes it (see the approval gate's README)."""


@event("approval.decided", 1)
class ApprovalDecided(EventModel):
    approval_id: Ref
    decision: Decision
    comment: Personal[Comment] = ""
    decided_by: Personal[Name] = Field(description="reviewer identity, or 'chorus:fallback' when automatic")
    tier: str = Field(max_length=200)
    automatic: bool = False
    requested_by: Name = Field(description="the service that asked; it resumes the workflow")


# -- the approval policy: the approval gate's API (GET/PUT /v1/approval-policy), not an event ----

API_BODY = ConfigDict(frozen=True, extra="forbid")
"""A field the policy does not know is refused (422 naming it), never ignored: a misspelt
condition must not widen a rule."""


class Conditions(Model):
    """All given must hold (an absent fact fails a condition on it)."""

    model_config = API_BODY

    amount_cents_at_least: int | None = Field(default=None, ge=0)
    amount_cents_below: int | None = Field(default=None, ge=0)
    confidence_below: float | None = Field(default=None, ge=0, le=1)
    any_risk_flag: list[str] = Field(default=[], max_length=20)

    def hold(self, facts: ApprovalFacts) -> bool:
        amount, confidence = facts.amount_cents, facts.confidence
        if self.amount_cents_at_least is not None and (amount is None or amount < self.amount_cents_at_least):
            return False
        if self.amount_cents_below is not None and (amount is None or amount >= self.amount_cents_below):
            return False
        if self.confidence_below is not None and (confidence is None or confidence >= self.confidence_below):
            return False
        return not self.any_risk_flag or bool(set(self.any_risk_flag) & set(facts.risk_flags))


class PolicyRule(Model):
    """Approvals it matches (workflow type, business unit, requester, conditions; absent = any)
    go to ``chain``, and ``fallback`` decides when nobody answers."""

    model_config = API_BODY

    name: str = Field(min_length=1, max_length=200)
    workflow_type: str | None = Field(default=None, max_length=200)
    business_unit: str | None = Field(default=None, max_length=200)
    requested_by: str | None = Field(default=None, max_length=200)
    when: Conditions = Conditions()
    chain: list[EscalationStep] = Field(min_length=1, max_length=10)
    fallback: Fallback = "auto_reject"

    def matches(self, workflow_type: str, requested_by: str, facts: ApprovalFacts) -> bool:
        return (
            self.workflow_type in (None, workflow_type)
            and self.business_unit in (None, facts.business_unit)
            and self.requested_by in (None, requested_by)
            and self.when.hold(facts)
        )


class ApprovalPolicy(Model):
    """Rules in order, the first that matches routes the approval; none: the workflow
    type's declared chain (workflows.yaml), else the approval is refused."""

    model_config = API_BODY

    rules: list[PolicyRule] = Field(default=[], max_length=200)

    def route(self, workflow_type: str, requested_by: str, facts: ApprovalFacts) -> PolicyRule | None:
        return next((r for r in self.rules if r.matches(workflow_type, requested_by, facts)), None)


class ApprovalPolicyChange(Model):
    """PUT /v1/approval-policy: the new rules, and why (the audit trail keeps every version)."""

    model_config = API_BODY

    rules: list[PolicyRule] = Field(max_length=200)
    reason: Comment = Field(min_length=1, description="why, for the audit trail")
