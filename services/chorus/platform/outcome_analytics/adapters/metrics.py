"""The view in Prometheus form, computed from the view at scrape time (no second bookkeeping).

Gauges, not counters: the view is rebuilt from zero on every start and a dead
letter can move from ``unknown`` to its workflow's type, so these totals are not
monotonic. Each replica reads every partition, so its numbers are complete and
must not be summed across replicas. Per-hour numbers are on ``/analytics/outcomes``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from chorus.platform.outcome_analytics.domain import PERCENTILES, OutcomeView, percentile

PREFIX = "chorus_analytics"


def _gauge(name: str, documentation: str, *labels: str) -> GaugeMetricFamily:
    """A gauge of the view: every one is named under PREFIX and counted per workflow type
    (``labels``: what it is broken down by besides)."""
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, labels=["workflow_type", *labels])


class ViewCollector:
    """A prometheus_client collector over an :class:`OutcomeView` (register it once)."""

    def __init__(self, view: OutcomeView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        totals = self.view.totals()
        started = _gauge("workflows_started", "Workflows started (workflow.started), every hour in the view")
        ended = _gauge("workflows_ended", "Workflows ended (workflow.ended) by outcome", "outcome")
        escalated = _gauge(
            "workflows_escalated",
            "Workflows a person was asked about (approval or review requested),"
            " distinct per hour, summed over hours",
        )
        dead = _gauge(
            "dead_letters",
            "Dead-lettered records by error category, under their workflow's type ('unknown' when not known)",
            "category",
        )
        cost = _gauge(
            "completed_cost_usd",
            "What the language models of the completed workflows spent (workflow.spend_recorded),"
            " in dollars: divided by workflows_ended{outcome='completed'}, the cost per completed workflow",
        )
        duration = Metric(
            f"{PREFIX}_workflow_duration_seconds",
            "Workflow duration (ended minus started), exact quantiles over the view",
            "summary",
        )
        for workflow_type, total in totals.items():
            started.add_metric([workflow_type], total.started)
            escalated.add_metric([workflow_type], total.escalated)
            cost.add_metric([workflow_type], total.completed_cost / 1e6)
            for outcome, count in total.ended.items():
                ended.add_metric([workflow_type, outcome], count)
            for category, count in total.dead_lettered.items():
                dead.add_metric([workflow_type, category], count)
            labels = {"workflow_type": workflow_type}
            duration.add_sample(f"{PREFIX}_workflow_duration_seconds_count", labels, len(total.durations))
            duration.add_sample(f"{PREFIX}_workflow_duration_seconds_sum", labels, sum(total.durations))
            if total.durations:
                for p in PERCENTILES:
                    duration.add_sample(
                        f"{PREFIX}_workflow_duration_seconds",
                        {**labels, "quantile": str(p / 100)},
                        percentile(total.durations, p),
                    )
        yield from (started, ended, escalated, dead, cost, duration)
