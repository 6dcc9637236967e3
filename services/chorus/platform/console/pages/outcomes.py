"""Outcomes per workflow type and hour, and per release (from outcome analytics)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from chorus.platform.console.domain import chart, dead_letters_by_category, outcome_series
from chorus.platform.console.handlers import Console, key_of, render, signed_in

router = APIRouter()


@router.get("/outcomes", response_class=HTMLResponse)
async def outcomes(request: Request, c: Console) -> Response:
    session = signed_in(request)
    buckets = await c.apis.outcomes(key_of(session))
    panels: list[dict[str, Any]] = []
    for workflow_type in sorted({b.workflow_type for b in buckets}):
        series = outcome_series(buckets, workflow_type)
        panels.append(
            {
                "workflow_type": workflow_type,
                "charts": [chart(name, points) for name, points in series.items()],
                "dead_letters": dead_letters_by_category(buckets, workflow_type),
            }
        )
    releases = await c.apis.releases(key_of(session))
    return render(
        c, request, "outcomes.html", panels=panels, releases=[r.model_dump(mode="json") for r in releases]
    )
