"""The alert rules and dashboards an operator installs: they load, they fire when they should,
and every dashboard query is valid PromQL (promtool, from Debian's prometheus package, which
`make test` installs)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from chorus.tools import dashboards
from tests.support.processes import run_captured

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "observability" / "prometheus"
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$service": ".*"}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    assert tool, "promtool not found: deploy/local/prometheus.sh ensure installs it (make test runs it)"
    return run_captured([tool, *args], cwd=cwd, timeout_s=120)


def test_the_alert_rules_load_and_fire_exactly_as_their_unit_tests_say() -> None:
    checked = promtool("check", "rules", "alerts.yml", cwd=PROMETHEUS_DIR)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts.test.yml", cwd=PROMETHEUS_DIR)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert has at least one unit test that expects it to fire.
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    cases = yaml.safe_load((PROMETHEUS_DIR / "alerts.test.yml").read_text())["tests"]
    firing = {t["alertname"] for case in cases for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert alerts == firing, f"alerts without a test that fires them: {sorted(alerts - firing)}"


def test_a_broken_rule_fails_the_check(tmp_path: Path) -> None:
    """The check above can fail: promtool rejects invalid PromQL."""
    (tmp_path / "bad.yml").write_text(
        "groups:\n  - name: bad\n    rules:\n      - alert: Bad\n        expr: sum by (service (up)\n"
    )
    assert promtool("check", "rules", "bad.yml", cwd=tmp_path).returncode != 0


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """Compiled as recording rules (Grafana's variables replaced by what they expand to)."""
    records = []
    for i, (where, query) in enumerate(dashboards.expressions()):
        expr = query
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"{where}: a variable promtool cannot check: {expr}"
        records.append({"record": f"chorus:dashboard_query:{i}", "expr": expr})
    assert len(records) >= 30
    rules = {"groups": [{"name": "panels", "rules": records}]}
    (tmp_path / "dashboards.yml").write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", "dashboards.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.checkout
def test_the_committed_dashboards_are_what_the_generator_writes() -> None:
    committed = {p.name: p.read_text() for p in dashboards.DASHBOARDS_DIR.glob("*.json")}
    assert committed == dashboards.rendered(), "run `make docs` to regenerate the dashboards"


def test_the_overview_shows_the_four_numbers() -> None:
    overview = dashboards.render(dashboards.OVERVIEW)
    text = " ".join(t["expr"] for p in overview["panels"] for t in p.get("targets", []))
    for metric in ("chorus_consumer_lag", "chorus_handle_seconds_bucket", "chorus_failures_total"):
        assert metric in text
    assert re.search(r'chorus_workflows_ended_total\{outcome="completed"\}', text)
