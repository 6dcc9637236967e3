"""chart.png of one run: throughput and latency percentiles (runs in .local/bench-venv).

Usage: python bench/chart.py results.json chart.png
"""

from __future__ import annotations

import json
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on a build machine
import matplotlib.pyplot as plt


def _bar(ax: Any, labels: list[str], stats: list[dict[str, Any]], colors: list[str]) -> None:
    med = [s["median"] for s in stats]
    err = [
        [m - s["min"] for m, s in zip(med, stats, strict=True)],
        [s["max"] - m for m, s in zip(med, stats, strict=True)],
    ]
    ax.bar(labels, med, yerr=err, capsize=4, color=colors)
    for i, m in enumerate(med):
        ax.annotate(f"{m:.0f}" if m >= 10 else f"{m:.1f}", (i, m), ha="center", va="bottom", fontsize=8)


def main(src: str, dst: str) -> None:
    with open(src) as f:
        r = json.load(f)
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    fig.suptitle(f"Chorus bench ({r['mode']}, {r['started_at']}): median, bars = min-max of rounds")
    ax = axes[0][0]
    labels, stats, colors = [], [], []
    if "R1" in r:
        labels += ["R1 raw", "R2 Chorus no-op"]
        stats += [r["R1"], r["R2"]["chorus"]]
        colors += ["grey", "tab:blue"]
    if "R3" in r:
        labels += ["R3 raw+INSERT", "R3 Chorus durable"]
        stats += [r["R3"]["baseline"], r["R3"]["chorus"]]
        colors += ["grey", "tab:blue"]
    if labels:
        _bar(ax, labels, stats, colors)
    ax.set_title("One hop: messages/s")
    ax.tick_params(axis="x", labelsize=8)

    ax = axes[0][1]
    if "R5" in r:
        labels, stats, colors = ["Chorus"], [r["R5"]["chorus"]["per_s"]], ["tab:blue"]
        if "sealed" in r["R5"]:  # R5 with encryption on (runs before it have none)
            labels.append("Chorus sealed")
            stats.append(r["R5"]["sealed"]["per_s"])
            colors.append("tab:cyan")
        labels.append("DBOS")
        stats.append(r["R5"]["dbos"]["per_s"])
        colors.append("tab:orange")
        if "restate" in r["R5"]:  # runs before Restate was a baseline have none
            labels.append("Restate")
            stats.append(r["R5"]["restate"]["per_s"])
            colors.append("tab:purple")
        _bar(ax, labels, stats, colors)
    ax.set_title("R5: 5-step workflows/s")

    ax = axes[1][0]
    if "R4" in r:
        groups = []
        for cond, label in (("inflight", "1 in flight"), ("load", "50% load")):
            for q in ("p50", "p99"):
                groups.append(
                    (
                        f"{label}\n{q}",
                        r["R4"][cond]["raw"][q]["median"],
                        r["R4"][cond]["chorus"][q]["median"],
                    )
                )
        x = range(len(groups))
        ax.bar([i - 0.2 for i in x], [g[1] for g in groups], 0.4, label="raw loop", color="grey")
        ax.bar(
            [i + 0.2 for i in x],
            [g[2] for g in groups],
            0.4,
            label="Chorus no-op",
            color="tab:blue",
        )
        ax.set_xticks(list(x), [g[0] for g in groups], fontsize=8)
        ax.legend()
    ax.set_title("R4: per-hop latency (ms)")

    ax = axes[1][1]
    groups = []
    if "R5" in r:
        for q in ("p50_ms", "p99_ms"):
            groups.append(
                (
                    f"R5 workflow {q[:3]}",
                    r["R5"]["chorus"][q]["median"],
                    r["R5"]["dbos"][q]["median"],
                    r["R5"]["restate"][q]["median"] if "restate" in r["R5"] else 0.0,
                )
            )
    x = range(len(groups))
    if groups:
        ax.bar([i - 0.27 for i in x], [g[1] for g in groups], 0.27, label="Chorus", color="tab:blue")
        ax.bar(list(x), [g[2] for g in groups], 0.27, label="DBOS", color="tab:orange")
        if "restate" in r["R5"]:
            ax.bar([i + 0.27 for i in x], [g[3] for g in groups], 0.27, label="Restate", color="tab:purple")
    if "timers" in r:
        t = r["timers"]["lateness_ms"]
        n = len(groups)
        ax.bar([n, n + 1], [t["p50"], t["p99"]], 0.4, color="tab:green", label="timer lateness")
        groups += [("timer p50", 0, 0, 0), ("timer p99", 0, 0, 0)]
    ax.set_xticks(list(range(len(groups))), [g[0] for g in groups], fontsize=8)
    ax.set_title("Workflow latency and timer lateness (ms)")
    if groups:
        ax.legend()
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
