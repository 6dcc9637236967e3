"""Every API's requests in OpenTelemetry's HTTP server metrics: one series per route
template, not per id in the path; a method HTTP does not define and a path no route
matches add no series of the caller's choosing; answers the body cap gives are counted."""

from __future__ import annotations

import httpx
from fastapi import APIRouter
from prometheus_client.parser import text_string_to_metric_families

from chorus.base.metrics import Metrics
from chorus.web.webapi import create_api

Series = tuple[str, str, str]


def requests_counted(metrics: Metrics) -> dict[Series, float]:
    return {
        (
            s.labels["http_request_method"],
            s.labels["http_route"],
            s.labels["http_response_status_code"],
        ): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if s.name == "http_server_request_duration_seconds_count"
    }


async def test_requests_are_counted_by_method_route_template_and_status() -> None:
    metrics = Metrics("test")
    app = create_api(title="test", max_body_bytes=64, metrics=metrics)
    router = APIRouter()

    @router.get("/v1/things/{thing_id}")
    async def thing(thing_id: str) -> dict[str, str]:
        return {"thing_id": thing_id}

    @router.post("/v1/things")
    async def add(body: dict[str, str]) -> dict[str, str]:
        return body

    app.include_router(router)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as http:
        for thing_id in ("a", "b", "c"):
            assert (await http.get(f"/v1/things/{thing_id}")).status_code == 200
        assert (await http.get("/no/such/path/x1")).status_code == 404
        assert (await http.get("/no/such/path/x2")).status_code == 404
        assert (await http.request("BREW", "/v1/things/a")).status_code == 405
        assert (await http.post("/v1/things", json={"name": "x" * 100})).status_code == 413

    assert requests_counted(metrics) == {
        ("GET", "/v1/things/{thing_id}", "200"): 3,
        ("GET", "", "404"): 2,
        ("_OTHER", "/v1/things/{thing_id}", "405"): 1,
        ("POST", "", "413"): 1,  # refused before routing
    }
    active = {
        s.labels["http_request_method"]: s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
        if s.name == "http_server_active_requests"
    }
    assert set(active.values()) == {0}
