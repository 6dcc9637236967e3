"""The soak's report: tables every five minutes and at the end, fitted slopes, and plots.

``report.md`` and ``samples.json`` are rewritten at each report; at the end the plots
(PNG, drawn by tests/soak/plots.py in the bench's tools venv, which has matplotlib) go
beside them. ``python -m tests.soak.report DIR`` renders them again from samples.json.

A slope is a Theil-Sen fit (robust to momentary peaks) of a process's RSS (MiB/hour) or open
file descriptors (per hour) over the second half of the run (the window), per process run: a
restart (a new pid, a fault's doing) starts a new run. Only a run that was already up when
the window opened counts (what a process does in its first minutes, filling its caches and
pools, is not a leak), the longest such run of each process, if it spans ten minutes. Growth
is judged, not shrinking, and only for Chorus's own processes and PostgreSQL's postmaster;
the others are reported: a broker's RSS is its JVM heap growing toward -Xmx as G1 expands
it, the sum over PostgreSQL's backends counts the shared buffers each one touches and
follows how many there are, and the sandbox keeps every call it answers in memory by design
(it is the test's outside world, counting effects).
"""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability.driver import Tracked
from tests.soak.sampler import Sample

RSS_BOUND_MIB_PER_H = 8.0
"""The bound a process's RSS slope must stay within: a service's caches fill in the first
minutes and then hold; a leak of one record's worth per workflow would show as tens of
MiB per hour at this load."""
FD_BOUND_PER_H = 5.0
"""Open file descriptors: a connection leaked per fault would be about 30 per hour at this
fault rate, one per hundred workflows about 9; connections opened and closed as faults come
and go move a service's count by a few either way."""
MIN_RUN_S = 600.0
NOT_JUDGED = {
    "postgres-backends": "the sum over backends, which come and go and count the shared buffers they touch",
    "sandbox": "the test's outside world, which keeps every call it answers",
}
"""Reported, not judged (besides the brokers: ``kafka-<n>``, JVMs growing their heap)."""


def judged(process: str) -> bool:
    return process not in NOT_JUDGED and not process.startswith("kafka-")


@dataclass
class Slope:
    process: str
    per_hour: float
    start: float
    end: float
    points: int
    span_s: float


def fit(points: list[tuple[float, float]]) -> float:
    """Theil-Sen slope of (seconds, value), per hour: the median of the slopes between every
    two points. A least-squares fit let two momentary peaks decide: the first hour's soak
    judged the notifier's open files, 27 to 31 with a burst of mail connections at 43 and
    49, as growing 11/h; a leak moves the floor, which this follows."""
    pairs = [
        (y2 - y1) / (x2 - x1) for (x1, y1), (x2, y2) in itertools.combinations(sorted(points), 2) if x2 > x1
    ]
    return 3600 * statistics.median(pairs) if pairs else 0.0


def slopes(samples: list[Sample], what: str) -> list[Slope]:
    """Per process, the slope of ``what`` ("rss_mib" or "fds") over the longest of its runs
    in the second half of the samples that was already up when that half began."""
    if not samples:
        return []
    half = samples[-1].t_s / 2
    up_before = {(name, pid) for s in samples if s.t_s < half for name, pid in s.pids.items()}
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for s in samples:
        if s.t_s < half:
            continue
        values: dict[str, float] = getattr(s, what)
        for name, value in values.items():
            run = (name, s.pids.get(name, 0))
            if run in up_before:
                runs.setdefault(run, []).append((s.t_s, float(value)))
    best: dict[str, list[tuple[float, float]]] = {}
    for (name, _), points in runs.items():
        if len(points) > len(best.get(name, [])):
            best[name] = points
    out = []
    for name, points in sorted(best.items()):
        span = points[-1][0] - points[0][0]
        if span < MIN_RUN_S or len(points) < 5:
            continue
        out.append(Slope(name, fit(points), points[0][1], points[-1][1], len(points), span))
    return out


def over(fitted: list[Slope], bound: float) -> list[Slope]:
    """The judged processes whose value grew faster than ``bound`` per hour."""
    return [s for s in fitted if judged(s.process) and s.per_hour > bound]


def worst(fitted: list[Slope]) -> str:
    """The steepest growth of a judged process, or n/a when the run was too short to fit one."""
    grown = [s.per_hour for s in fitted if judged(s.process)]
    return f"{max(grown):.2f}" if grown else "n/a"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_windows(workflows: list[Tracked], started_at: float, window_s: float) -> list[dict[str, Any]]:
    """p50/p99 of submitted -> settled, by the window the workflow was submitted in."""
    by_window: dict[int, list[float]] = {}
    for w in workflows:
        if w.settled_at is not None:
            by_window.setdefault(int((w.submitted_at - started_at) // window_s), []).append(
                w.settled_at - w.submitted_at
            )
    return [
        {
            "from_min": k * window_s / 60,
            "count": len(v),
            "p50_s": percentile(v, 0.5),
            "p99_s": percentile(v, 0.99),
        }
        for k, v in sorted(by_window.items())
    ]


@dataclass
class Verdict:
    summary: str
    """The one line a script reads."""
    violations: list[str]
    rss_over: list[Slope] = field(default_factory=list)
    fds_over: list[Slope] = field(default_factory=list)


@dataclass
class Report:
    out_dir: Path
    meta: dict[str, Any]
    fault_rows: list[dict[str, Any]] = field(default_factory=list)

    def write(
        self,
        samples: list[Sample],
        workflows: list[Tracked],
        started_at: float,
        final: dict[str, Any] | None = None,
        plots: list[str] | None = None,
    ) -> Verdict:
        return self.render(samples, latency_windows(workflows, started_at, 300.0), final, plots or [])

    def render(
        self,
        samples: list[Sample],
        windows: list[dict[str, Any]],
        final: dict[str, Any] | None,
        plots: list[str],
    ) -> Verdict:
        """samples.json and report.md; with ``final`` (the reconciler's counts: ``summary``,
        ``violations``), the verdict with the slopes' added."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        rss, fds = slopes(samples, "rss_mib"), slopes(samples, "fds")
        verdict = None
        if final is not None:
            rss_over, fds_over = over(rss, RSS_BOUND_MIB_PER_H), over(fds, FD_BOUND_PER_H)
            grew = [f"RSS grew {s.per_hour:.1f} MiB/h: {s.process}" for s in rss_over]
            grew += [f"open files grew {s.per_hour:.1f}/h: {s.process}" for s in fds_over]
            verdict = Verdict(
                f"{final['summary']} rss_growth_max_mib_h={worst(rss)} fd_growth_max_h={worst(fds)}",
                [*final["violations"], *grew],
                rss_over,
                fds_over,
            )
        data = {
            "meta": self.meta,
            "final": final,
            "faults": self.fault_rows,
            "latency_windows": windows,
            "plots": plots,
            "slopes": {
                "rss_mib_per_h": [vars(s) for s in rss],
                "fds_per_h": [vars(s) for s in fds],
                "bounds": {"rss_mib_per_h": RSS_BOUND_MIB_PER_H, "fds_per_h": FD_BOUND_PER_H},
            },
            "samples": [s.to_json() for s in samples],
        }
        (self.out_dir / "samples.json").write_text(json.dumps(data, separators=(",", ":")))
        path = self.out_dir / "report.md"
        path.write_text(self.markdown(samples, rss, fds, windows, final, verdict, plots))
        return verdict or Verdict("", [])

    def markdown(
        self,
        samples: list[Sample],
        rss: list[Slope],
        fds: list[Slope],
        windows: list[dict[str, Any]],
        final: dict[str, Any] | None,
        verdict: Verdict | None,
        plots: list[str],
    ) -> str:
        m = self.meta
        lines = [
            f"# Soak: {m['minutes']:.0f} minutes, seed {m['seed']}",
            "",
            f"Started {m['started']} on {m['machine']}. Replay: `make soak SOAK_MINUTES={m['minutes']:.0f} "
            f"SOAK_SEED={m['seed']}`.",
            "",
            f"- Deployment: {m['deployment']}",
            f"- Capacity measured first: {m['capacity_per_s']:.2f} workflows/s settled (closed loop of "
            f"{m['capacity_in_flight']}, {m['capacity_s']:.0f} s, the three reference workflows in turn); "
            f"load: {m['rate_per_s']:.2f}/s (50%)",
        ]
        if final is not None and verdict is not None:
            lines += [
                "",
                "## Result",
                "",
                f"**{verdict.summary}**",
                "",
                f"- Faults injected: {final['faults']} ({final['by_kind']}); double faults: "
                f"{final['doubles']}; network partitions: {final['partitions']}",
                f"- Workflows: {final['started']} started, {final['settled']} settled; max recovery "
                f"{final['max_recovery_s']}",
                f"- Growth of every judged process within {RSS_BOUND_MIB_PER_H} MiB/h of RSS and "
                f"{FD_BOUND_PER_H}/h of open files: {'no' if verdict.rss_over else 'yes'}, "
                f"{'no' if verdict.fds_over else 'yes'} (slopes below)",
            ]
            for v in verdict.violations[:30]:
                lines.append(f"- violation: {v}")
            for n in final["notes"][:30]:
                lines.append(f"- note: {n}")
        lines += ["", "## Over time (every 5 minutes)", ""]
        lines += [
            "| min | started | settled | lag (sum) | outbox (sum) | tables MiB | indexes MiB | "
            "group members | RSS sum MiB | fds sum |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in _every(samples, 300.0):
            lines.append(
                f"| {s.t_s / 60:.0f} | {s.started} | {s.settled} | {sum(s.lag.values())} | "
                f"{sum(s.outbox.values())} | {s.table_mib:.1f} | {s.index_mib:.1f} | "
                f"{sum(s.group_members.values())} | {sum(s.rss_mib.values()):.0f} | {sum(s.fds.values())} |"
            )
        lines += ["", "## Latency (submitted -> settled, by 5-minute window of submission)", ""]
        lines += ["| from min | workflows | p50 s | p99 s |", "|---|---|---|---|"]
        lines += [
            f"| {w['from_min']:.0f} | {w['count']} | {w['p50_s']:.2f} | {w['p99_s']:.2f} |" for w in windows
        ]
        lines += [
            "",
            "## Slopes (second half of the run; each process's longest run that was up before it)",
            "",
            "| process | RSS MiB/h | RSS from -> to | fds/h | fds from -> to |",
            "|---|---|---|---|---|",
        ]
        fd_by = {f.process: f for f in fds}
        for r in rss:
            f = fd_by.get(r.process)
            fd_cells = f"{f.per_hour:+.2f} | {f.start:.0f} -> {f.end:.0f}" if f else "- | -"
            flag = "" if r.per_hour <= RSS_BOUND_MIB_PER_H else " **over**"
            if f is not None and f.per_hour > FD_BOUND_PER_H:
                fd_cells += " **over**"
            name = r.process if judged(r.process) else f"{r.process} (not judged)"
            lines.append(f"| {name} | {r.per_hour:+.2f}{flag} | {r.start:.0f} -> {r.end:.0f} | {fd_cells} |")
        lines.append("")
        lines.append(
            f"Bounds on growth: RSS {RSS_BOUND_MIB_PER_H} MiB/h, open files {FD_BOUND_PER_H}/h. Not judged: "
            + "; ".join(f"{k}, {v}" for k, v in NOT_JUDGED.items())
            + "; the brokers, JVMs whose RSS is their heap growing toward -Xmx."
        )
        if samples:
            last = samples[-1]
            lines += ["", "## Database at the end (tables + indexes, MiB per schema)", ""]
            lines += ["| schema | MiB |", "|---|---|"]
            lines += [f"| {k} | {v:.2f} |" for k, v in sorted(last.tables.items(), key=lambda kv: -kv[1])]
        lines += ["", "## Faults", "", "| at min | kind | target | detail | healed after s |"]
        lines += ["|---|---|---|---|---|"]
        lines += [
            f"| {r['at_min']:.1f} | {r['kind']} | {r['target']} | {r['detail']} | {r['healed_s']} |"
            for r in self.fault_rows
        ]
        if plots:
            lines += ["", "## Plots", ""]
            lines += [f"![{p}]({p})" for p in plots]
        return "\n".join(lines) + "\n"


def _every(samples: list[Sample], step_s: float) -> list[Sample]:
    out: list[Sample] = []
    for s in samples:
        if not out or s.t_s - out[-1].t_s >= step_s:
            out.append(s)
    if samples and out[-1] is not samples[-1]:
        out.append(samples[-1])
    return out


def rerender(out_dir: Path) -> Verdict:
    """report.md again from a run's samples.json (a change to the report, or to how slopes
    are judged, without another hour of soak)."""
    data = json.loads((out_dir / "samples.json").read_text())
    samples = [Sample(**raw) for raw in data["samples"]]
    report = Report(out_dir, data["meta"], data["faults"])
    return report.render(samples, data["latency_windows"], data["final"], data.get("plots", []))


if __name__ == "__main__":
    import sys

    print(rerender(Path(sys.argv[1])).summary)
