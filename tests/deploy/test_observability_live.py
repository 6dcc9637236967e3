"""Prometheus, for real: the committed configuration of `make observe`, pointed at every
process of a running deployment through the targets the dev stack writes, scrapes them all
and loads the alert rules; every metric an alert or a dashboard names is one a service
exports."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import yaml

from chorus import __version__
from chorus.tools import dashboards
from chorus.tools.devstack import SERVICES, DevStack
from tests.support.prometheus import PROMETHEUS_DIR
from tests.support.prometheus import prometheus as running_prometheus
from tests.support.stacks import own_stack
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration

PROCESSES = (*SERVICES, "outcome_analytics", "console")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


@pytest.fixture(scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[DevStack]:
    tmp = tmp_path_factory.mktemp("observe")
    async with own_stack(tmp, kafka_bootstrap, database_url, name="observe", services=PROCESSES) as own:
        yield own.stack


@pytest.fixture(scope="module")
def prometheus(stack: DevStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`make observe`'s configuration and rules, scraping the targets the dev stack writes."""
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), stack.scrape_targets()) as url:
        yield url


async def test_prometheus_scrapes_every_service_and_loads_the_alert_rules(
    stack: DevStack, prometheus: str
) -> None:
    async with httpx.AsyncClient(timeout=10.0) as http:

        async def targets() -> list[dict[str, Any]] | None:
            try:
                answer = await http.get(f"{prometheus}/api/v1/targets")
            except httpx.TransportError:
                return None  # still starting
            if answer.status_code == 503:
                return None  # up, its storage not yet ready (seen on a loaded machine)
            body = answer.json()
            active: list[dict[str, Any]] = body["data"]["activeTargets"]
            up = [t for t in active if t["health"] == "up"]
            return active if len(up) == len(PROCESSES) == len(active) else None

        try:
            active = await wait_until(targets, timeout_s=90, interval_s=1.0, what="every target up")
        except AssertionError:
            body = (await http.get(f"{prometheus}/api/v1/targets")).json()
            raise AssertionError(
                [(t["labels"], t["health"], t["lastError"]) for t in body["data"]["activeTargets"]]
            ) from None
        assert {t["labels"]["service"] for t in active} == set(PROCESSES)
        assert {t["labels"]["release"] for t in active} == {"main"}

        async def chorus_rules() -> list[dict[str, Any]]:
            groups = (await http.get(f"{prometheus}/api/v1/rules")).json()["data"]["groups"]
            [group] = [g for g in groups if g["name"] == "chorus"]
            found: list[dict[str, Any]] = group["rules"]
            return found

        rules = await chorus_rules()
        alerts = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())["groups"][0]["rules"]
        assert {r["name"] for r in rules} == {r["alert"] for r in alerts}

        # A rule's health is "unknown" until its group's first evaluation: wait for that, then
        # every rule must evaluate cleanly (an expression Prometheus rejects stays "err").
        async def evaluated() -> list[dict[str, Any]] | None:
            rules = await chorus_rules()
            return rules if all(r["health"] != "unknown" for r in rules) else None

        rules = await wait_until(evaluated, timeout_s=60, interval_s=1.0, what="the rules' first evaluation")
        assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]

        # Process metrics from every service, through Prometheus.
        async def cpu() -> set[str] | None:
            query = {"query": 'count by (service) (process_cpu_seconds_total{job="chorus"})'}
            found = (await http.get(f"{prometheus}/api/v1/query", params=query)).json()["data"]["result"]
            services = {r["metric"]["service"] for r in found}
            return services if services == set(PROCESSES) else None

        await wait_until(cpu, timeout_s=30, interval_s=1.0, what="process metrics of every service")

        # What runs where: every process's build info, with Chorus's version.
        query = {"query": "chorus_build_info"}
        found = (await http.get(f"{prometheus}/api/v1/query", params=query)).json()["data"]["result"]
        built = {r["metric"]["service"]: r["metric"] for r in found}
        assert set(built) == set(PROCESSES)
        assert {m["chorus_version"] for m in built.values()} == {__version__}
        assert {m["version"] for m in built.values()} == {__version__}  # the platform's own services


async def test_every_metric_an_alert_or_a_dashboard_names_is_exported(stack: DevStack) -> None:
    """A panel or an alert on a metric nobody exports would stay empty or silent forever."""
    declared: set[str] = set()
    async with httpx.AsyncClient(timeout=10.0) as http:
        for name in PROCESSES:
            url = (stack.procs[name].health_url or "").replace("/health", "/metrics")
            text = (await http.get(url)).text
            declared |= {_family(m) for m in re.findall(r"^# TYPE (\S+) ", text, flags=re.MULTILINE)}
    alerts = (PROMETHEUS_DIR / "alerts.yml").read_text()
    queries = " ".join(expr for _, expr in dashboards.expressions())
    named = {
        _family(m)
        for m in re.findall(r"\b((?:chorus|process|python)_[a-z_]+)\b", alerts + " " + queries)
        if not m.startswith("chorus_dashboard")
    }
    assert named, "found no metric names"
    assert named <= declared, f"named but exported by no service: {sorted(named - declared)}"


def _family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name
