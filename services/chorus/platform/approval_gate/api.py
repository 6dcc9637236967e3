"""The approval policy API (beside ``/health`` and ``/metrics``); the gateway offers the same
routes to its callers and forwards them here with the caller's key.

GET /v1/approval-policy           the policy in force: version, rules, who changed it, why
PUT /v1/approval-policy           {"rules": [...], "reason": "..."}: a new version (operators);
                                  it applies to the next approval, no restart
GET /v1/approval-policy/history   every version, newest first (the audit trail)

Rules are tried in order; the first that matches an approval (workflow type, business
unit, requester, conditions on amount, confidence, risk flags) gives its chain and
fallback; when none matches, the workflow type's approval_chain (workflows.yaml), or the
approval is refused. The chain a request names is never used.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from chorus.base.clock import Clock
from chorus.contracts.api.approval_gate import ApprovalPolicyHistory
from chorus.contracts.approvals import ApprovalPolicy, ApprovalPolicyChange
from chorus.kernel.service import RuntimeHandle
from chorus.platform.approval_gate.adapters.policies import PolicyStore
from chorus.web.apikeys import ApiKey, role
from chorus.web.typedclient import bound, provided
from chorus.web.webapi import api_router, problems

Reader = Annotated[ApiKey, Depends(role("operator", "auditor"))]
Operator = Annotated[ApiKey, Depends(role("operator"))]
Policies = Annotated[PolicyStore, Depends(provided("policies", PolicyStore))]
Now = Annotated[Clock, Depends(provided("clock", Clock))]

router = api_router(tags=["approval policy"], responses=problems(401, 403, 415, 422))


def routes(rt: RuntimeHandle) -> APIRouter:
    """The policy API over the gate's store (its dependencies) and clock."""
    return bound(router, policies=rt.deps.policies, clock=rt.clock)


@router.get("/v1/approval-policy", summary="The approval policy in force")
async def current(who: Reader, store: Policies) -> dict[str, Any]:
    return (await store.current()).published().model_dump(mode="json")


@router.put("/v1/approval-policy", summary="Change the approval policy (a new version)")
async def change(body: ApprovalPolicyChange, who: Operator, store: Policies, clock: Now) -> dict[str, Any]:
    policy = ApprovalPolicy(rules=body.rules)
    changed = await store.change(policy, by=who.principal, reason=body.reason, now=clock.now())
    return changed.published().model_dump(mode="json")


@router.get("/v1/approval-policy/history", summary="Every version, newest first")
async def history(
    who: Reader, store: Policies, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    versions = [v.published() for v in await store.history(limit)]
    return ApprovalPolicyHistory(versions=versions).model_dump(mode="json")
