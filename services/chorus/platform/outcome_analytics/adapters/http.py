"""``GET /analytics/outcomes`` and ``GET /analytics/releases``: the view as JSON, beside
the runtime's /health and /metrics; and ``GET /analytics/partitions/...``, one replica's
part of it, which the replica asked gathers from the others (adapters/replicas.py).

Any API key may read them (:mod:`chorus.web.apikeys`): they hold counts and durations per
workflow type and hour, nothing about one workflow or person.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from chorus.contracts.api.outcome_analytics import Outcomes, Releases
from chorus.platform.outcome_analytics.adapters.replicas import PARTS_PATH, NotWhole, Replicas
from chorus.platform.outcome_analytics.domain import parse_hour
from chorus.web.apikeys import ApiKey, caller
from chorus.web.typedclient import bound, provided
from chorus.web.webapi import Problem, api_router, invalid_parameter, problems

OUTCOMES_PATH = "/analytics/outcomes"
RELEASES_PATH = "/analytics/releases"

Cluster = Annotated[Replicas, Depends(provided("replicas", Replicas))]
Anyone = Annotated[ApiKey, Depends(caller)]
HourParameter = Annotated[
    str | None,
    Query(
        max_length=64,
        description="any ISO 8601 date-time (no offset means UTC): the one-hour window containing it",
        examples=["2026-03-01T10:00:00Z"],
    ),
]
TypeParameter = Annotated[str | None, Query(max_length=200)]

router = api_router(tags=["analytics"], responses=problems(400, 401, 503))


def routes(replicas: Replicas) -> APIRouter:
    """The API over the view gathered by ``replicas``."""
    return bound(router, replicas=replicas)


def _window(hour: str | None) -> datetime | None:
    try:
        return parse_hour(hour) if hour else None
    except ValueError:
        raise invalid_parameter(
            "hour",
            f"hour {hour!r} is not an ISO 8601 date-time in the years 1 to 9999, e.g. 2026-03-01T10:00:00Z",
        ) from None


def _not_whole(exc: NotWhole) -> Problem:
    # Partitions move during a rebalance and a restored replica reads its changelogs
    # first: seconds, after which the same question gets the whole answer.
    return Problem(503, "Service unavailable", str(exc), headers={"Retry-After": "2"})


@router.get(OUTCOMES_PATH, summary="Outcomes per workflow type and hour, oldest first")
async def outcomes(
    who: Anyone,
    request: Request,
    workflow_type: TypeParameter = None,
    hour: HourParameter = None,
    *,
    replicas: Cluster,
) -> dict[str, Any]:
    window = _window(hour)
    try:
        buckets = await replicas.outcomes(
            workflow_type=workflow_type or None, hour=window, authorization=request.headers["authorization"]
        )
    except NotWhole as exc:
        raise _not_whole(exc) from None
    return Outcomes.model_validate({"buckets": buckets}).model_dump(mode="json")


@router.get(RELEASES_PATH, summary="Outcomes per service release: a canary beside its stable release")
async def releases(
    who: Anyone, request: Request, service: TypeParameter = None, *, replicas: Cluster
) -> dict[str, Any]:
    try:
        rows = await replicas.releases(
            service=service or None, authorization=request.headers["authorization"]
        )
    except NotWhole as exc:
        raise _not_whole(exc) from None
    return Releases.model_validate({"releases": rows}).model_dump(mode="json")


@router.get(f"{PARTS_PATH}/outcomes", include_in_schema=False)
async def outcomes_part(
    who: Anyone, workflow_type: TypeParameter = None, hour: HourParameter = None, *, replicas: Cluster
) -> dict[str, Any]:
    """This replica's buckets, of the partitions it holds whole (listed)."""
    return replicas.local.outcomes(workflow_type=workflow_type or None, hour=_window(hour))


@router.get(f"{PARTS_PATH}/releases", include_in_schema=False)
async def releases_part(who: Anyone, service: TypeParameter = None, *, replicas: Cluster) -> dict[str, Any]:
    """This replica's release partials, of the partitions it holds whole (listed)."""
    return replicas.local.releases(service=service or None)
