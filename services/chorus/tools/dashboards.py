"""Grafana dashboards of Chorus, as JSON under deploy/observability/grafana/dashboards.

Written by ``make docs`` (``python -m chorus.tools.dashboards``) from the panels below, so a
dashboard is a short list of queries here rather than a thousand lines of JSON edited by
hand; a test keeps the committed files equal to what this writes, and compiles every
panel's PromQL with promtool. The compose file's observability profile and the Helm chart
provision the same files.

Every series carries ``service`` (the scrape configuration sets it), so each dashboard
filters with the ``service`` variable.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
DASHBOARDS_DIR = ROOT / "deploy" / "observability" / "grafana" / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SERVICE = 'service=~"$service"'


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[tuple[str, str], ...]
    """(PromQL, legend) pairs."""
    unit: str = "short"
    kind: str = "timeseries"
    description: str = ""
    width: int = 12


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: tuple[tuple[str, tuple[Panel, ...]], ...]
    tags: tuple[str, ...] = ("chorus",)
    links: tuple[str, ...] = field(default=())


def q(expr: str, legend: str = "") -> tuple[str, str]:
    return expr, legend


def single(
    title: str,
    measure: Callable[[str, str, str], str],
    metric: str,
    by: str = "",
    labels: str = SERVICE,
    *,
    legend: str = "",
    unit: str = "short",
    kind: str = "timeseries",
    description: str = "",
) -> Panel:
    """A panel of one query, ``measure(metric, by, labels)`` (``total``, ``highest`` or ``rate``),
    whose legend names each series by its ``by`` labels unless ``legend`` is given."""
    legend = legend or " ".join(f"{{{{{label.strip()}}}}}" for label in by.split(",") if label.strip())
    return Panel(
        title, (q(measure(metric, by, labels), legend),), unit=unit, kind=kind, description=description
    )


def total(metric: str, by: str = "", labels: str = SERVICE) -> str:
    """A gauge's level, summed (by ``by``)."""
    return _aggregate("sum", by, _series(metric, labels))


def highest(metric: str, by: str = "", labels: str = SERVICE) -> str:
    """A gauge's highest level (by ``by``)."""
    return _aggregate("max", by, _series(metric, labels))


def rate(metric: str, by: str = "", labels: str = SERVICE) -> str:
    """A counter's per-second rate, summed (by ``by``)."""
    return _aggregate("sum", by, f"rate({_series(metric, labels)}[$__rate_interval])")


def quantile(q: float, histogram: str, by: str = "", labels: str = SERVICE) -> str:
    """The ``q`` quantile of a histogram's observations (its ``_bucket`` series), by ``by``."""
    return f"histogram_quantile({q}, {rate(f'{histogram}_bucket', f'{by}, le' if by else 'le', labels)})"


def _aggregate(operator: str, by: str, expr: str) -> str:
    return f"{operator} by ({by}) ({expr})" if by else f"{operator}({expr})"


def _series(metric: str, labels: str) -> str:
    return f"{metric}{{{labels}}}" if labels else metric


OVERVIEW = Dashboard(
    uid="chorus-overview",
    title="Chorus: overview",
    description="The four numbers: queue depth, latency, failures by category, completion.",
    rows=(
        (
            "The four numbers",
            (
                Panel(
                    "Queue depth: records waiting",
                    (
                        q(total("chorus_consumer_lag", "service"), "{{service}} lag"),
                        q(total("chorus_outbox_backlog", "service"), "{{service}} outbox"),
                    ),
                    description="Records not yet consumed, and committed events not yet published.",
                ),
                Panel(
                    "Latency: read to committed, p50 and p99",
                    (
                        q(quantile(0.5, "chorus_handle_seconds", "service"), "{{service}} p50"),
                        q(quantile(0.99, "chorus_handle_seconds", "service"), "{{service}} p99"),
                    ),
                    unit="s",
                ),
                single(
                    "Failures by category",
                    rate,
                    "chorus_failures_total",
                    "category",
                    unit="ops",
                    description="Transient ones retry; persistent, semantic and unexpected need a person.",
                ),
                Panel(
                    "Completion rate",
                    (
                        q(
                            rate("chorus_workflows_ended_total", labels='outcome="completed"')
                            + " / "
                            + rate("chorus_workflows_ended_total", labels=""),
                            "completed / ended",
                        ),
                    ),
                    unit="percentunit",
                ),
            ),
        ),
        (
            "Workflows",
            (
                single(
                    "Workflows ended, by type and outcome",
                    rate,
                    "chorus_workflows_ended_total",
                    "workflow_type, outcome",
                    labels="",
                    unit="ops",
                ),
                single("Services up", total, "up", "service", f'job="chorus", {SERVICE}', kind="stat"),
            ),
        ),
    ),
)

PER_SERVICE = Dashboard(
    uid="chorus-service",
    title="Chorus: per service",
    description="One service (pick it above): traffic, queue, latency, failures, process.",
    rows=(
        (
            "Traffic",
            (
                single("Events in, by type", rate, "chorus_events_in_total", "event_type", unit="ops"),
                single("Events out, by topic", rate, "chorus_events_out_total", "topic", unit="ops"),
                single(
                    "Consumer lag, by partition",
                    total,
                    "chorus_consumer_lag",
                    "topic, partition",
                    legend="{{topic}}/{{partition}}",
                ),
                single(
                    "Consumer group lag, from Kafka",
                    highest,
                    "chorus_consumer_group_lag",
                    "topic",
                    # The rollout service reads every group's (each of its replicas the same).
                    labels='service_name=~"$service"',
                    legend="{{topic}}",
                    description="Read from Kafka by the rollout service: there while no replica runs "
                    "(an agent scaled to zero), when the service's own lag is not.",
                ),
                Panel(
                    "In flight, outbox backlog",
                    (
                        q(total("chorus_in_flight"), "in flight"),
                        q(total("chorus_outbox_backlog"), "outbox backlog"),
                    ),
                ),
            ),
        ),
        (
            "Latency and failures",
            (
                Panel(
                    "Handle latency p99, by event type",
                    (q(quantile(0.99, "chorus_handle_seconds", "event_type"), "{{event_type}}"),),
                    unit="s",
                ),
                Panel(
                    "Failures, retries, dead letters",
                    (
                        q(rate("chorus_failures_total", "category"), "failed: {{category}}"),
                        q(rate("chorus_retries_total"), "retries"),
                        q(rate("chorus_dead_letters_total"), "dead letters"),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Skipped: duplicates, ended workflows, other releases",
                    (
                        q(rate("chorus_duplicates_skipped_total"), "duplicates"),
                        q(rate("chorus_events_dropped_total"), "workflow ended"),
                        q(rate("chorus_events_not_mine_total"), "another release's"),
                    ),
                    unit="ops",
                ),
                single(
                    "Circuit breakers (0 closed, 1 half-open, 2 open)",
                    highest,
                    "chorus_breaker_state",
                    "dependency",
                ),
            ),
        ),
        (
            "HTTP API",
            (
                single(
                    "Requests, by route and status",
                    rate,
                    "http_server_request_duration_seconds_count",
                    "http_request_method, http_route, http_response_status_code",
                    unit="reqps",
                ),
                Panel(
                    "Request duration p99, by route",
                    (
                        q(
                            quantile(0.99, "http_server_request_duration_seconds", "http_route"),
                            "{{http_route}}",
                        ),
                    ),
                    unit="s",
                ),
                single("Requests in flight", total, "http_server_active_requests", "http_request_method"),
            ),
        ),
        (
            "Process",
            (
                single("CPU", rate, "process_cpu_seconds_total", "instance", unit="percentunit"),
                single("Resident memory", total, "process_resident_memory_bytes", "instance", unit="bytes"),
                single(
                    "Garbage collections, by generation",
                    rate,
                    "python_gc_collections_total",
                    "generation",
                    legend="gen {{generation}}",
                    unit="ops",
                ),
                single("Open file descriptors", total, "process_open_fds", "instance"),
            ),
        ),
    ),
)

DEAD_LETTERS = Dashboard(
    uid="chorus-dead-letters",
    title="Chorus: dead letters",
    description="What failed for good, what waits behind it, and what is stuck behind an outage.",
    rows=(
        (
            "Dead letters",
            (
                single(
                    "Dead-lettered, by service and category",
                    rate,
                    "chorus_dead_letters_total",
                    "service, category",
                    unit="ops",
                ),
                single(
                    "Open dead letters",
                    total,
                    "chorus_deadletters_open",
                    "service_name, category",
                    # The dead-letter service counts every service's: by the one they are of.
                    labels='service_name=~"$service"',
                    description="Waiting for a redrive or a discard (the dead-letter service's count).",
                ),
                single(
                    "Oldest open dead letter",
                    highest,
                    "chorus_deadletters_oldest_open_age_seconds",
                    "service_name",
                    labels='service_name=~"$service"',
                    unit="s",
                ),
                single(
                    "Workflows parked behind a dead letter too long",
                    highest,
                    "chorus_workflows_parked_too_long",
                    labels="",
                    legend="workflows",
                    kind="stat",
                ),
            ),
        ),
        (
            "Held back",
            (
                single("Records stuck behind an outage", highest, "chorus_records_stuck", "service"),
                Panel(
                    "Events the broker refused (set aside, dead-lettered)",
                    (
                        q(
                            "sum by (service, topic) "
                            f"(increase(chorus_outbox_refused_total{{{SERVICE}}}[$__range]))",
                            "{{service}} {{topic}}",
                        ),
                    ),
                ),
            ),
        ),
    ),
)

TIMERS = Dashboard(
    uid="chorus-timers",
    title="Chorus: timers",
    description="Durable timers: how many wait, how many fire, how late.",
    rows=(
        (
            "Timers",
            (
                single("Pending timers", total, "chorus_timers_pending", labels="", legend="pending"),
                single(
                    "Fired, by purpose", rate, "chorus_timers_fired_total", "purpose", labels="", unit="ops"
                ),
                Panel(
                    "Lateness: fire time minus due time",
                    (
                        q(quantile(0.5, "chorus_timer_lateness_seconds", labels=""), "p50"),
                        q(quantile(0.99, "chorus_timer_lateness_seconds", labels=""), "p99"),
                    ),
                    unit="s",
                ),
            ),
        ),
    ),
)

APPROVALS = Dashboard(
    uid="chorus-approvals",
    title="Chorus: approvals and escalations",
    description="People in the loop: what is asked, routed, escalated, decided, and who is told.",
    rows=(
        (
            "Approvals",
            (
                single(
                    "Approval events, by type",
                    rate,
                    "chorus_events_in_total",
                    "event_type",
                    'service="approval_gate", event_type=~"approval\\\\..*|review\\\\..*"',
                    unit="ops",
                    description="As the approval gate reads them: requested, routed, escalated, decided.",
                ),
                single(
                    "Escalations and reminders fired",
                    rate,
                    "chorus_timers_fired_total",
                    "purpose",
                    'purpose=~"escalation|reminder"',
                    unit="ops",
                ),
                single(
                    "Notifications: attempts by channel and result",
                    rate,
                    "chorus_notifications_attempts_total",
                    "channel, result",
                    labels="",
                    unit="ops",
                ),
                single(
                    "Workflows ended while a person decided",
                    rate,
                    "chorus_workflows_ended_total",
                    "outcome",
                    'outcome=~"rejected|timed_out"',
                    unit="ops",
                ),
            ),
        ),
    ),
)

DASHBOARDS = (OVERVIEW, PER_SERVICE, DEAD_LETTERS, TIMERS, APPROVALS)


def render(dashboard: Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (schema 39: rows of 6-high panels, 2 a row)."""
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row_title, row_panels in dashboard.rows:
        panels.append(
            {
                "type": "row",
                "title": row_title,
                "id": next_id,
                "collapsed": False,
                "gridPos": _pos(0, y, 24, 1),
            }
        )
        next_id += 1
        y += 1
        x = 0
        for panel in row_panels:
            if x + panel.width > 24:
                x, y = 0, y + 8
            panels.append(_panel(panel, next_id, _pos(x, y, panel.width, 8)))
            next_id += 1
            x += panel.width
        y += 8
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "timezone": "utc",
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                },
                {
                    "name": "service",
                    "label": "Service",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": {"query": 'label_values(up{job="chorus"}, service)', "refId": "service"},
                    "definition": 'label_values(up{job="chorus"}, service)',
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                    "sort": 1,
                },
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def _pos(x: int, y: int, w: int, h: int) -> dict[str, int]:
    return {"x": x, "y": y, "w": w, "h": h}


def _panel(panel: Panel, panel_id: int, pos: dict[str, int]) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": pos,
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def rendered() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {f"{d.uid}.json": json.dumps(render(d), indent=2) + "\n" for d in DASHBOARDS}


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel query, for checking with promtool."""
    return [
        (f"{d.uid} / {p['title']} / {t['refId']}", t["expr"])
        for d in DASHBOARDS
        for p in (render(d)["panels"])
        if p["type"] != "row"
        for t in p["targets"]
    ]


def main() -> int:
    DASHBOARDS_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        path = DASHBOARDS_DIR / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
