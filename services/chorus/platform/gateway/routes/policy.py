"""GET and PUT /v1/approval-policy, GET /v1/approval-policy/history: the approval policy
(owned by the approval gate), forwarded there with the caller's own key."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request
from fastapi.responses import JSONResponse

from chorus.contracts.approvals import ApprovalPolicyChange
from chorus.platform.gateway.routes.deps import Api, Operator, OperatorOrAuditor
from chorus.web.webapi import api_router, problems

router = api_router()


def _authorization(request: Request) -> str:
    """The caller's key as the approval gate reads it (it records who changed the policy)."""
    key = request.headers.get("x-api-key")
    return f"Bearer {key}" if key else request.headers.get("authorization", "")


@router.get("/v1/approval-policy", responses=problems(503))
async def approval_policy(request: Request, who: OperatorOrAuditor, api: Api) -> JSONResponse:
    """The policy in force: version, rules (first match routes an approval), who changed it, why."""
    found = await api.policy.current(_authorization(request))
    return JSONResponse(found.model_dump(mode="json"))


@router.put("/v1/approval-policy", responses=problems(503))
async def change_approval_policy(
    request: Request, body: ApprovalPolicyChange, who: Operator, api: Api
) -> JSONResponse:
    """A new version of the rules; it applies to the next approval, without a restart."""
    changed = await api.policy.change(body, _authorization(request))
    return JSONResponse(changed.model_dump(mode="json"))


@router.get("/v1/approval-policy/history", responses=problems(503))
async def approval_policy_history(
    request: Request,
    who: OperatorOrAuditor,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    *,
    api: Api,
) -> JSONResponse:
    """Every version, newest first: the audit trail of the policy."""
    history = await api.policy.history(limit, _authorization(request))
    return JSONResponse(history.model_dump(mode="json"))
