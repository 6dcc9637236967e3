"""The report of a run: a markdown table and JSON in .local/reliability-results/<timestamp>/,
and the one summary line a script can read."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability.infra import ROOT

RESULTS = ROOT / ".local" / "reliability-results"


def new_results_dir(label: str = "") -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / (f"{stamp}-{label}" if label else stamp)
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class ScenarioResult:
    name: str
    description: str
    deployment: str
    workflows: int
    faults: int
    faults_by_kind: dict[str, int]
    lost: int
    duplicate_effects: int
    stuck: int
    wrong: int
    max_recovery_s: float | None
    checks: dict[str, str]
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fault_log: list[dict[str, Any]] = field(default_factory=list)
    startup_crashes: list[str] = field(default_factory=list)
    """Processes that died while (re)starting and were started again, as a supervisor
    would: not a violation of the scenario's invariants, but a finding of its own."""
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def failure_message(self) -> str:
        lines = [f"scenario {self.name} failed ({len(self.violations)} violation(s)):"]
        lines += [f"  - {v}" for v in self.violations[:40]]
        return "\n".join(lines)


def _faults_cell(result: ScenarioResult) -> str:
    kinds = ", ".join(f"{k} x{n}" for k, n in sorted(result.faults_by_kind.items()))
    return f"{result.faults} ({kinds})" if kinds else str(result.faults)


def _recovery_cell(result: ScenarioResult) -> str:
    if result.max_recovery_s is None:
        return "not recovered" if result.lost or result.stuck else "-"
    return f"{result.max_recovery_s:.1f}s"


def markdown_table(results: list[ScenarioResult]) -> str:
    head = (
        "| scenario | workflows | faults injected | lost | duplicate side effects | stuck "
        "| max recovery time | other checks | result |\n"
        "|---|---:|---|---:|---:|---:|---:|---|---|\n"
    )
    rows = []
    for r in results:
        failing = [name for name, verdict in r.checks.items() if verdict != "ok"]
        other = "all ok" if not failing else "failing: " + ", ".join(failing)
        rows.append(
            f"| {r.name} | {r.workflows} | {_faults_cell(r)} | {r.lost} | {r.duplicate_effects} "
            f"| {r.stuck} | {_recovery_cell(r)} | {other} | {'pass' if r.ok else 'FAIL'} |"
        )
    return head + "\n".join(rows) + "\n"


def summary_line(results: list[ScenarioResult]) -> str:
    return (
        f"scenarios={len(results)} workflows={sum(r.workflows for r in results)} "
        f"faults={sum(r.faults for r in results)} lost={sum(r.lost for r in results)} "
        f"duplicate_effects={sum(r.duplicate_effects for r in results)} "
        f"stuck={sum(r.stuck for r in results)}"
    )


def write_report(
    results_dir: Path, results: list[ScenarioResult], *, title: str, meta: dict[str, Any]
) -> Path:
    """report.md (table, then each scenario's violations and notes) and report.json."""
    lines = [f"# {title}", "", f"{meta.get('started', '')} · {meta.get('machine', '')}", ""]
    for name, description in dict(meta.get("deployments", {})).items():
        lines.append(f"- deployment `{name}`: {description}")
    lines.append("")
    lines.append(markdown_table(results))
    lines.append(f"`{summary_line(results)}`\n")
    lines.append(
        "Lost: not settled at the recovery deadline and nothing pending anywhere in the system. "
        "Stuck: not settled, but the system still holds work for it. Duplicate side effects: "
        "payments, report deliveries, ticket replies or completion webhooks beyond one per "
        "idempotency key, as counted by the sandbox. Max recovery time: from the end of the last "
        "fault to the last workflow settling.\n"
    )
    for r in results:
        lines.append(f"## {r.name}{'' if r.ok else ' — FAILED'}\n")
        lines.append(f"{r.description} (deployment `{r.deployment}`, {r.duration_s:.0f}s)\n")
        lines.append("Checks: " + ", ".join(f"{k}: {v}" for k, v in r.checks.items()) + "\n")
        if r.violations:
            lines.append("Violations:\n")
            lines += [f"- {v}" for v in r.violations]
            lines.append("")
        if r.startup_crashes:
            lines.append(
                f"Processes that died while starting and were started again ({len(r.startup_crashes)}):\n"
            )
            lines += [f"- {c}" for c in r.startup_crashes]
            lines.append("")
        if r.notes:
            lines += [f"- note: {n}" for n in r.notes]
            lines.append("")
    path = results_dir / "report.md"
    path.write_text("\n".join(lines))
    (results_dir / "report.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "summary": summary_line(results),
                "scenarios": [{**asdict(r), "ok": r.ok} for r in results],
            },
            indent=2,
            default=str,
        )
    )
    return path
