"""``GET /analytics/outcomes``: the view as JSON, beside the runtime's /health and /metrics."""

from __future__ import annotations

from aiohttp import web

from outcome_analytics.domain import OutcomeView, parse_hour

OUTCOMES_PATH = "/analytics/outcomes"


def add_routes(app: web.Application, view: OutcomeView) -> None:
    """Register the analytics routes on ``app`` (before the server starts)."""

    async def outcomes(request: web.Request) -> web.Response:
        """``?workflow_type=T&hour=H`` (both optional) -> ``{"buckets": [...]}``, oldest first.

        ``hour`` is any ISO 8601 date-time (no offset means UTC); it selects the
        one-hour window containing it. A bad ``hour`` is a 400 naming it.
        """
        workflow_type = request.query.get("workflow_type") or None
        hour_text = request.query.get("hour") or None
        try:
            hour = parse_hour(hour_text) if hour_text is not None else None
        except ValueError:
            return web.json_response(
                {
                    "error": f"hour {hour_text!r} is not an ISO 8601 date-time",
                    "example": "2026-03-01T10:00:00Z",
                },
                status=400,
            )
        rows = view.rows(workflow_type=workflow_type, hour=hour)
        return web.json_response({"buckets": rows})

    app.router.add_get(OUTCOMES_PATH, outcomes)
