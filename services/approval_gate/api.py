"""The approval policy API (beside ``/health`` and ``/metrics``); the gateway offers the same
routes to its callers and forwards them here with the caller's key.

GET /v1/approval-policy           the policy in force: version, rules, who changed it, why
PUT /v1/approval-policy           {"rules": [...], "reason": "..."}: a new version (operators);
                                  it applies to the next approval, no restart
GET /v1/approval-policy/history   every version, newest first (the audit trail)

Rules are tried in order; the first that matches an approval (workflow type, business
unit, requester, conditions on amount, confidence, risk flags) gives its chain and
fallback; when none matches, the requester's own chain applies.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from approval_gate.adapters.policies import PolicyStore
from chorus.kernel.service import RuntimeHandle
from chorus.web.apikeys import ApiKey, role
from chorus.web.webapi import api_router, problems
from chorus_contracts.approvals import ApprovalPolicy, ApprovalPolicyChange

Reader = Annotated[ApiKey, Depends(role("operator", "auditor"))]
Operator = Annotated[ApiKey, Depends(role("operator"))]


def routes(rt: RuntimeHandle) -> APIRouter:
    store: PolicyStore = rt.deps.policies
    router = api_router(tags=["approval policy"], responses=problems(401, 403, 415, 422))

    @router.get("/v1/approval-policy", summary="The approval policy in force")
    async def current(who: Reader) -> dict[str, Any]:
        return (await store.current()).as_json()

    @router.put("/v1/approval-policy", summary="Change the approval policy (a new version)")
    async def change(body: ApprovalPolicyChange, who: Operator) -> dict[str, Any]:
        policy = ApprovalPolicy(rules=body.rules)
        changed = await store.change(policy, by=who.principal, reason=body.reason, now=rt.clock.now())
        return changed.as_json()

    @router.get("/v1/approval-policy/history", summary="Every version, newest first")
    async def history(who: Reader, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
        return {"versions": [v.as_json() for v in await store.history(limit)]}

    return router
