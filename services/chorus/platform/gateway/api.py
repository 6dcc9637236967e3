"""The HTTP API (FastAPI; its OpenAPI document is served at /openapi.json).

Accept-and-resume: POST answers 202 with a workflow id at once; the work runs in
the agent services. Reads come from the audit projection. Every error is
``application/problem+json`` naming what is wrong.

The routes are in :mod:`chorus.platform.gateway.routes` (one module per resource); this assembles them,
in the order their paths are matched, with what they share (:class:`GatewayApi`).
"""

from __future__ import annotations

import inspect

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from chorus.kernel.service import RuntimeHandle
from chorus.outside.ratelimit import KeyedRateLimits
from chorus.platform.gateway.adapters.policy import (
    ApprovalPolicyApi,
    PolicyApiUnavailableError,
    PolicyRefusedError,
)
from chorus.platform.gateway.adapters.readmodel import ReadModel, ReadModelUnavailableError
from chorus.platform.gateway.config import Settings
from chorus.platform.gateway.domain import workflow_types
from chorus.platform.gateway.routes import approvals, bulk, policy, resets, schedules, workflows
from chorus.platform.gateway.routes.deps import GatewayApi
from chorus.platform.gateway.routes.signals import signal_router
from chorus.platform.gateway.routes.submit import submit_router
from chorus.web.webapi import PROBLEM, create_api, problem_response, problems


def create_app(
    rt: RuntimeHandle, settings: Settings, reads: ReadModel, policy_api: ApprovalPolicyApi
) -> FastAPI:
    """The API; ``reads`` answers what it says about workflows and approvals (the audit
    projector's read API), ``policy_api`` manages the approval policy (the approval gate's)."""
    app = create_api(
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.api_body_timeout_s,
        title="Chorus gateway",
        version="1.0.0",
        description="Submit long-running agent workflows, watch them, approve them.",
        responses=problems(400, 401, 403, 413, 422, 429, 503),
        metrics=rt.metrics,
    )
    app.add_exception_handler(ReadModelUnavailableError, _unavailable)
    app.add_exception_handler(PolicyApiUnavailableError, _unavailable)
    app.add_exception_handler(PolicyRefusedError, _refused)
    kinds = workflow_types(rt.registry, settings.deadlines_s)
    app.state.settings = settings
    app.state.api_keys = settings.api_keys
    app.state.limits = KeyedRateLimits(
        rt.pool, "api", rate_per_s=settings.api_rate_per_s, burst=settings.api_burst, clock=rt.clock
    )
    app.state.gateway = GatewayApi(
        rt,
        settings,
        reads,
        policy_api,
        kinds,
        settings.public_url or f"http://{settings.api_host}:{settings.api_port}",
    )
    app.include_router(submit_router(kinds))
    _unknown_type_answer(app, sorted(kinds))
    for routes in (workflows, approvals, policy, bulk, schedules, resets):
        app.include_router(routes.router)
    app.include_router(signal_router(rt.registry))
    return app


async def _unavailable(request: Request, exc: Exception) -> Response:
    return problem_response(
        503, "Read model unavailable", str(exc), request.url.path, headers={"Retry-After": "5"}
    )


async def _refused(request: Request, exc: Exception) -> Response:
    """The approval gate's own refusal (its problem+json), passed on as it is."""
    assert isinstance(exc, PolicyRefusedError)
    return JSONResponse(exc.problem, status_code=exc.status, media_type=PROBLEM)


def _unknown_type_answer(app: FastAPI, known: list[str]) -> None:
    """POST to a type that does not exist is a 405 (the path is a workflow's, for GET),
    with the types that do exist in the answer."""
    answer_http_error = app.exception_handlers[StarletteHTTPException]

    async def _unknown_type(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        path = request.url.path
        if exc.status_code == 405 and request.method == "POST" and path.startswith("/v1/workflows/"):
            asked = path.removeprefix("/v1/workflows/")[:100]
            detail = f"no workflow type {asked!r} to start; known: {known}"
            return problem_response(405, "Method Not Allowed", detail, path, headers=exc.headers)
        response = answer_http_error(request, exc)
        return await response if inspect.isawaitable(response) else response

    app.add_exception_handler(StarletteHTTPException, _unknown_type)
