"""Grafana dashboards of Chorus, as JSON under deploy/observability/grafana/dashboards.

Written by ``make docs`` (``python -m chorus_tools.dashboards``) from the panels below, so a
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
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
                        q(f"sum by (service) (chorus_consumer_lag{{{SERVICE}}})", "{{service}} lag"),
                        q(f"sum by (service) (chorus_outbox_backlog{{{SERVICE}}})", "{{service}} outbox"),
                    ),
                    description="Records not yet consumed, and committed events not yet published.",
                ),
                Panel(
                    "Latency: read to committed, p50 and p99",
                    (
                        q(
                            "histogram_quantile(0.5, sum by (service, le) "
                            f"(rate(chorus_handle_seconds_bucket{{{SERVICE}}}[$__rate_interval])))",
                            "{{service}} p50",
                        ),
                        q(
                            "histogram_quantile(0.99, sum by (service, le) "
                            f"(rate(chorus_handle_seconds_bucket{{{SERVICE}}}[$__rate_interval])))",
                            "{{service}} p99",
                        ),
                    ),
                    unit="s",
                ),
                Panel(
                    "Failures by category",
                    (
                        q(
                            f"sum by (category) (rate(chorus_failures_total{{{SERVICE}}}[$__rate_interval]))",
                            "{{category}}",
                        ),
                    ),
                    unit="ops",
                    description="Transient ones retry; persistent, semantic and unexpected need a person.",
                ),
                Panel(
                    "Completion rate",
                    (
                        q(
                            'sum(rate(chorus_workflows_ended_total{outcome="completed"}[$__rate_interval]))'
                            " / sum(rate(chorus_workflows_ended_total[$__rate_interval]))",
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
                Panel(
                    "Workflows ended, by type and outcome",
                    (
                        q(
                            "sum by (workflow_type, outcome) "
                            "(rate(chorus_workflows_ended_total[$__rate_interval]))",
                            "{{workflow_type}} {{outcome}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Services up",
                    (q(f'sum by (service) (up{{job="chorus", {SERVICE}}})', "{{service}}"),),
                    kind="stat",
                ),
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
                Panel(
                    "Events in, by type",
                    (
                        q(
                            "sum by (event_type) "
                            f"(rate(chorus_events_in_total{{{SERVICE}}}[$__rate_interval]))",
                            "{{event_type}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Events out, by topic",
                    (
                        q(
                            f"sum by (topic) (rate(chorus_events_out_total{{{SERVICE}}}[$__rate_interval]))",
                            "{{topic}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Consumer lag, by partition",
                    (
                        q(
                            f"sum by (topic, partition) (chorus_consumer_lag{{{SERVICE}}})",
                            "{{topic}}/{{partition}}",
                        ),
                    ),
                ),
                Panel(
                    "In flight, outbox backlog",
                    (
                        q(f"sum(chorus_in_flight{{{SERVICE}}})", "in flight"),
                        q(f"sum(chorus_outbox_backlog{{{SERVICE}}})", "outbox backlog"),
                    ),
                ),
            ),
        ),
        (
            "Latency and failures",
            (
                Panel(
                    "Handle latency p99, by event type",
                    (
                        q(
                            "histogram_quantile(0.99, sum by (event_type, le) "
                            f"(rate(chorus_handle_seconds_bucket{{{SERVICE}}}[$__rate_interval])))",
                            "{{event_type}}",
                        ),
                    ),
                    unit="s",
                ),
                Panel(
                    "Failures, retries, dead letters",
                    (
                        q(
                            f"sum by (category) (rate(chorus_failures_total{{{SERVICE}}}[$__rate_interval]))",
                            "failed: {{category}}",
                        ),
                        q(f"sum(rate(chorus_retries_total{{{SERVICE}}}[$__rate_interval]))", "retries"),
                        q(
                            f"sum(rate(chorus_dead_letters_total{{{SERVICE}}}[$__rate_interval]))",
                            "dead letters",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Skipped: duplicates, ended workflows, other releases",
                    (
                        q(
                            f"sum(rate(chorus_duplicates_skipped_total{{{SERVICE}}}[$__rate_interval]))",
                            "duplicates",
                        ),
                        q(
                            f"sum(rate(chorus_events_dropped_total{{{SERVICE}}}[$__rate_interval]))",
                            "workflow ended",
                        ),
                        q(
                            f"sum(rate(chorus_events_not_mine_total{{{SERVICE}}}[$__rate_interval]))",
                            "another release's",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Circuit breakers (0 closed, 1 half-open, 2 open)",
                    (q(f"max by (dependency) (chorus_breaker_state{{{SERVICE}}})", "{{dependency}}"),),
                ),
            ),
        ),
        (
            "Process",
            (
                Panel(
                    "CPU",
                    (
                        q(
                            "sum by (instance) "
                            f"(rate(process_cpu_seconds_total{{{SERVICE}}}[$__rate_interval]))",
                            "{{instance}}",
                        ),
                    ),
                    unit="percentunit",
                ),
                Panel(
                    "Resident memory",
                    (q(f"sum by (instance) (process_resident_memory_bytes{{{SERVICE}}})", "{{instance}}"),),
                    unit="bytes",
                ),
                Panel(
                    "Garbage collections, by generation",
                    (
                        q(
                            "sum by (generation) "
                            f"(rate(python_gc_collections_total{{{SERVICE}}}[$__rate_interval]))",
                            "gen {{generation}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Open file descriptors",
                    (q(f"sum by (instance) (process_open_fds{{{SERVICE}}})", "{{instance}}"),),
                ),
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
                Panel(
                    "Dead-lettered, by service and category",
                    (
                        q(
                            "sum by (service, category) "
                            f"(rate(chorus_dead_letters_total{{{SERVICE}}}[$__rate_interval]))",
                            "{{service}} {{category}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Open dead letters",
                    (q("sum by (service, category) (chorus_deadletters_open)", "{{service}} {{category}}"),),
                    description="Waiting for a redrive or a discard (the dead-letter service's count).",
                ),
                Panel(
                    "Oldest open dead letter",
                    (q("max by (service) (chorus_deadletters_oldest_open_age_seconds)", "{{service}}"),),
                    unit="s",
                ),
                Panel(
                    "Workflows parked behind a dead letter too long",
                    (q("max(chorus_workflows_parked_too_long)", "workflows"),),
                    kind="stat",
                ),
            ),
        ),
        (
            "Held back",
            (
                Panel(
                    "Records stuck behind an outage",
                    (q(f"max by (service) (chorus_records_stuck{{{SERVICE}}})", "{{service}}"),),
                ),
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
                Panel("Pending timers", (q("sum(chorus_timers_pending)", "pending"),)),
                Panel(
                    "Fired, by purpose",
                    (
                        q(
                            "sum by (purpose) (rate(chorus_timers_fired_total[$__rate_interval]))",
                            "{{purpose}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Lateness: fire time minus due time",
                    (
                        q(
                            "histogram_quantile(0.5, sum by (le) "
                            "(rate(chorus_timer_lateness_seconds_bucket[$__rate_interval])))",
                            "p50",
                        ),
                        q(
                            "histogram_quantile(0.99, sum by (le) "
                            "(rate(chorus_timer_lateness_seconds_bucket[$__rate_interval])))",
                            "p99",
                        ),
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
                Panel(
                    "Approval events, by type",
                    (
                        q(
                            "sum by (event_type) (rate(chorus_events_in_total"
                            '{service="approval_gate", event_type=~"approval\\\\..*|review\\\\..*"}'
                            "[$__rate_interval]))",
                            "{{event_type}}",
                        ),
                    ),
                    unit="ops",
                    description="As the approval gate reads them: requested, routed, escalated, decided.",
                ),
                Panel(
                    "Escalations and reminders fired",
                    (
                        q(
                            'sum by (purpose) (rate(chorus_timers_fired_total{purpose=~"escalation|reminder"}'
                            "[$__rate_interval]))",
                            "{{purpose}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Notifications: attempts by channel and result",
                    (
                        q(
                            "sum by (channel, result) "
                            "(rate(chorus_notifications_attempts_total[$__rate_interval]))",
                            "{{channel}} {{result}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Workflows ended while a person decided",
                    (
                        q(
                            "sum by (outcome) (rate(chorus_workflows_ended_total"
                            '{outcome=~"rejected|timed_out"}[$__rate_interval]))',
                            "{{outcome}}",
                        ),
                    ),
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
