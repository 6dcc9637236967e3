"""A real Prometheus for a test: `make observe`'s configuration (its scrape job, the alert
rules as shipped), scraping the targets the test names with the labels a deployment gives
them, every second. Alerts are what the rules say, but for their ``for:`` wait (zero): a
test cannot wait ten minutes, and what it checks is which series fire and with which labels."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from chorus.tools.devstack import free_port
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "observability" / "prometheus"
Targets = list[dict[str, Any]]
"""File service discovery's entries: ``{"targets": ["host:port"], "labels": {...}}``."""


@contextlib.contextmanager
def prometheus(folder: Path, targets: Targets, *, waits: bool = True) -> Iterator[str]:
    """Prometheus on a free port, its files in ``folder``: its URL. ``waits``: the rules'
    ``for:`` as shipped (otherwise zero)."""
    binary = shutil.which("prometheus")
    assert binary, "no prometheus: `make test` installs it (deploy/local/prometheus.sh)"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "targets.json").write_text(json.dumps(targets))
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.local.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    rules: list[str] = []
    for name in config["rule_files"]:
        document = yaml.safe_load((PROMETHEUS_DIR / name).read_text())
        if not waits:
            for group in document["groups"]:
                for rule in group["rules"]:
                    rule.pop("for", None)
        (folder / name).write_text(yaml.safe_dump(document, sort_keys=False))
        rules.append(str(folder / name))
    config["rule_files"] = rules
    [job] = config["scrape_configs"]
    job["file_sd_configs"][0]["files"] = [str(folder / "targets.json")]
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with (folder / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


async def query(http: httpx.AsyncClient, url: str, promql: str) -> list[dict[str, Any]] | None:
    """An instant query's result (None while Prometheus starts)."""
    try:
        answer = await http.get(f"{url}/api/v1/query", params={"query": promql})
    except httpx.TransportError:
        return None
    if answer.status_code == 503:
        return None  # up, its storage not yet ready
    body = answer.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def labels_of(url: str, promql: str, what: str, timeout_s: float = 120) -> list[dict[str, str]]:
    """The label sets of ``promql``'s result, once it has one."""
    async with httpx.AsyncClient(timeout=10.0) as http:

        async def found() -> list[dict[str, str]] | None:
            return [r["metric"] for r in await query(http, url, promql) or []] or None

        shown: list[dict[str, str]] = await wait_until(found, timeout_s=timeout_s, interval_s=1.0, what=what)
        return shown


def panel_query(dashboard: str, title: str, **variables: str) -> str:
    """The query of the panel ``title`` of the committed dashboard ``dashboard`` (the file's
    stem), its ``$variables`` replaced as Grafana does."""
    document = json.loads(
        (ROOT / "deploy" / "observability" / "grafana" / "dashboards" / f"{dashboard}.json").read_text()
    )
    panels = [p for p in document["panels"] if p.get("title") == title]
    assert len(panels) == 1, f"{dashboard}: {len(panels)} panel(s) titled {title!r}"
    expr: str = panels[0]["targets"][0]["expr"]
    for name, value in variables.items():
        expr = expr.replace(f"${name}", value)
    return expr
