"""The notifier's API (beside /health and /metrics): what was sent to whom, every attempt.

GET /v1/notifications?workflow_id=&approval_id=   deliveries, newest first, each with its
                                                  attempts (time, ok, error, duration)

Operators and auditors (an API key, :mod:`chorus.web.apikeys`). No message text: the
recipients are principals and tiers; addresses stay in configuration.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from chorus.contracts.api.notifier import Notifications
from chorus.kernel.service import RuntimeHandle
from chorus.platform.notifier.adapters import deliveries
from chorus.web.apikeys import ApiKey, role
from chorus.web.typedclient import bound, provided
from chorus.web.webapi import api_router, problems

Reader = Annotated[ApiKey, Depends(role("operator", "auditor"))]
Runtime = Annotated[RuntimeHandle, Depends(provided("rt", RuntimeHandle))]

router = api_router(responses=problems(401, 403, 422))


def routes(rt: RuntimeHandle) -> APIRouter:
    """The notifier's API over the deliveries of the service ``rt`` runs."""
    return bound(router, rt=rt)


@router.get("/v1/notifications", tags=["notifications"])
async def notifications(
    who: Reader,
    workflow_id: Annotated[str | None, Query(max_length=200)] = None,
    approval_id: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    *,
    rt: Runtime,
) -> dict[str, Any]:
    """Messages about approvals, newest first, with every attempt to deliver each."""
    async with rt.pool.acquire() as conn:
        found = await deliveries.list_deliveries(
            conn, workflow_id=workflow_id, approval_id=approval_id, limit=limit
        )
    return Notifications(notifications=found).model_dump(mode="json")
