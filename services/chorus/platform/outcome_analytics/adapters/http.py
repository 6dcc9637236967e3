"""``GET /analytics/outcomes`` and ``GET /analytics/releases``: the view as JSON, beside
the runtime's /health and /metrics.

Any API key may read it (:mod:`chorus.web.apikeys`): it holds counts and durations per
workflow type and hour, nothing about one workflow or person.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from chorus.contracts.api.outcome_analytics import Outcomes, Releases
from chorus.platform.outcome_analytics.domain import OutcomeView, parse_hour
from chorus.web.apikeys import ApiKey, caller
from chorus.web.typedclient import bound, provided
from chorus.web.webapi import api_router, invalid_parameter, problems

OUTCOMES_PATH = "/analytics/outcomes"
RELEASES_PATH = "/analytics/releases"

View = Annotated[OutcomeView, Depends(provided("view", OutcomeView))]
Anyone = Annotated[ApiKey, Depends(caller)]

router = api_router(tags=["analytics"], responses=problems(400, 401))


def routes(view: OutcomeView) -> APIRouter:
    """The API over ``view``."""
    return bound(router, view=view)


@router.get(OUTCOMES_PATH, summary="Outcomes per workflow type and hour, oldest first")
async def outcomes(
    who: Anyone,
    workflow_type: Annotated[str | None, Query(max_length=200)] = None,
    hour: Annotated[
        str | None,
        Query(
            max_length=64,
            description="any ISO 8601 date-time (no offset means UTC): the one-hour window containing it",
            examples=["2026-03-01T10:00:00Z"],
        ),
    ] = None,
    *,
    view: View,
) -> dict[str, Any]:
    try:
        window = parse_hour(hour) if hour else None
    except ValueError:
        raise invalid_parameter(
            "hour",
            f"hour {hour!r} is not an ISO 8601 date-time in the years 1 to 9999, e.g. 2026-03-01T10:00:00Z",
        ) from None
    buckets = view.rows(workflow_type=workflow_type or None, hour=window)
    return Outcomes.model_validate({"buckets": buckets}).model_dump(mode="json")


@router.get(RELEASES_PATH, summary="Outcomes per service release: a canary beside its stable release")
async def releases(
    who: Anyone, service: Annotated[str | None, Query(max_length=200)] = None, *, view: View
) -> dict[str, Any]:
    return Releases.model_validate({"releases": view.releases(service=service or None)}).model_dump(
        mode="json"
    )
