"""What every route of the gateway gets by dependency injection: the API's dependencies
(:class:`GatewayApi`, on ``app.state``), the caller and its role, and the shared parameters."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Request
from pydantic import ValidationError

from chorus.kernel.service import RuntimeHandle
from chorus.outside.ratelimit import KeyedRateLimits
from chorus.platform.gateway.adapters.policy import ApprovalPolicyApi
from chorus.platform.gateway.adapters.readmodel import ReadModel
from chorus.platform.gateway.config import Settings
from chorus.platform.gateway.domain import IDEMPOTENCY_KEY_MAX, IDEMPOTENCY_KEY_PATTERN
from chorus.platform.gateway.domain import WorkflowType as WorkflowKind
from chorus.web.apikeys import ApiKey, caller, role
from chorus.web.webapi import Problem


@dataclass(frozen=True)
class GatewayApi:
    """The runtime, the settings, the read model (the audit projector's read API), the
    approval policy (the approval gate's), the workflow types and the base of the URLs
    the API hands out."""

    rt: RuntimeHandle
    settings: Settings
    reads: ReadModel
    policy: ApprovalPolicyApi
    kinds: Mapping[str, WorkflowKind]
    base_url: str

    def status_url(self, workflow_id: str) -> str:
        return f"{self.base_url}/v1/workflows/{workflow_id}"


def gateway(request: Request) -> GatewayApi:
    api: GatewayApi = request.app.state.gateway
    return api


Api = Annotated[GatewayApi, Depends(gateway)]


# -- authentication (module level: FastAPI resolves these annotations from module globals) --


async def principal(request: Request, who: Annotated[ApiKey, Depends(caller)]) -> ApiKey:
    """The caller (:func:`chorus.web.apikeys.caller`); 429 with Retry-After when its key used
    up its rate (shared by every gateway replica)."""
    limits: KeyedRateLimits = request.app.state.limits
    granted = await limits.try_acquire(who.principal)
    if not granted.ok:
        retry_after = max(1, math.ceil(granted.wait_s))
        raise Problem(
            429,
            "Too many requests",
            f"{who.principal} exceeded its rate; retry in {retry_after} s",
            headers={"Retry-After": str(retry_after)},
        )
    return who


SubmitterOrOperator = Annotated[ApiKey, Depends(role("submitter", "operator", who=principal))]
Submitter = Annotated[ApiKey, Depends(role("submitter", who=principal))]
"""Only a submitter starts work: an operator, who may rewrite the approval policy, may not
also submit the payment that policy would let through (two people, never one)."""
Reviewer = Annotated[ApiKey, Depends(role("reviewer", who=principal))]
ReviewerOrOperator = Annotated[ApiKey, Depends(role("reviewer", "operator", who=principal))]
Operator = Annotated[ApiKey, Depends(role("operator", who=principal))]
OperatorOrAuditor = Annotated[ApiKey, Depends(role("operator", "auditor", who=principal))]
Anyone = Annotated[ApiKey, Depends(principal)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        max_length=IDEMPOTENCY_KEY_MAX,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="Makes a retried POST safe: the same key (per caller) answers with the same "
        "workflow. Printable ASCII, at most 255 characters.",
    ),
]
Traceparent = Annotated[str | None, Header(max_length=55, description="W3C trace context to continue")]
WorkflowId = Annotated[str, Path(max_length=200, description="the id the submission answered with")]
ApprovalId = Annotated[str, Path(max_length=200)]


def invalid_input(exc: ValidationError) -> Problem:
    """A 422 naming each field of a body's ``input`` that a model refused (JSON pointers
    below /input): for an input whose model another field of the request names (a
    schedule's workflow type, a bulk action's signal)."""
    errors = [
        {"pointer": "/".join(["/input", *map(str, e["loc"])]), "message": e["msg"]} for e in exc.errors()
    ]
    return Problem(422, "Invalid input", f"{errors[0]['pointer']}: {errors[0]['message']}", errors=errors)
