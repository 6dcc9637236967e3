"""The approval gate's policy API (the gateway offers the same routes and forwards them):
the policy in force and its history. A change is
:class:`chorus.contracts.approvals.ApprovalPolicyChange`."""

from __future__ import annotations

from chorus.contracts.api.base import ApiModel, IsoDateTime
from chorus.contracts.approvals import PolicyRule


class ApprovalPolicyVersion(ApiModel):
    """One version of the approval policy: its rules (the first that matches routes an
    approval), who made it, why and when."""

    version: int
    rules: list[PolicyRule]
    changed_by: str
    reason: str
    changed_at: IsoDateTime


class ApprovalPolicyHistory(ApiModel):
    """Every version, newest first: the audit trail of the policy."""

    versions: list[ApprovalPolicyVersion]
