"""The soak's plots, from its samples.json (runs in .local/bench-venv, which has matplotlib).

Usage: python tests/soak/plots.py RESULTS_DIR   (prints the names of the PNGs it wrote)

Each plot marks the faults as shaded spans (start to healed), so a bump can be read
against what caused it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on a build machine
import matplotlib.pyplot as plt


def faults(ax: Any, data: dict[str, Any]) -> None:
    for f in data["faults"]:
        start = f["at_min"]
        healed = float(f["healed_s"]) / 60 if f["healed_s"] != "-" else 0.5
        ax.axvspan(start, start + max(healed, 0.1), color="tab:red", alpha=0.12, lw=0)


def per_process(data: dict[str, Any], key: str, title: str, ylabel: str, out: Path) -> None:
    """Chorus's processes (and PostgreSQL's postmaster) above, on a scale of their own; the
    brokers, the sum over PostgreSQL's backends and the sandbox below (reported, not judged:
    tests/soak/report.py says why)."""
    samples = data["samples"]
    names = sorted({n for s in samples for n in s[key]})
    others = [n for n in names if n.startswith("kafka-") or n in ("postgres-backends", "sandbox")]
    fig, axes = plt.subplots(2, 1, figsize=(11, 9), sharex=True)
    for ax, group, what in (
        (axes[0], [n for n in names if n not in others], "Chorus's processes and PostgreSQL"),
        (axes[1], others, "brokers, PostgreSQL's backends (sum), sandbox"),
    ):
        for name in group:
            xs = [s["t_s"] / 60 for s in samples if name in s[key]]
            ys = [s[key][name] for s in samples if name in s[key]]
            ax.plot(xs, ys, lw=1, label=name)
        faults(ax, data)
        ax.set(title=f"{title}: {what}", ylabel=ylabel)
        ax.legend(fontsize=6, ncol=4, loc="upper left")
    axes[1].set(xlabel="minutes")
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def totals(data: dict[str, Any], out: Path) -> None:
    samples = data["samples"]
    t = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(2, 2, figsize=(12, 7))
    a, b, c, d = axes.flat
    a.plot(t, [s["started"] for s in samples], label="started")
    a.plot(t, [s["settled"] for s in samples], label="settled")
    a.set(title="workflows", xlabel="minutes")
    a.legend()
    b.plot(t, [sum(s["lag"].values()) for s in samples], label="consumer lag")
    b.plot(t, [sum(s["outbox"].values()) for s in samples], label="outbox backlog")
    b.set(title="lag and outbox backlog (records)", xlabel="minutes")
    b.legend()
    c.plot(t, [s["table_mib"] for s in samples], label="tables")
    c.plot(t, [s["index_mib"] for s in samples], label="indexes")
    c.set(title="PostgreSQL sizes (MiB)", xlabel="minutes")
    c.legend()
    d.plot(t, [sum(s["group_members"].values()) for s in samples], label="members, all groups")
    d.set(title="consumer group members", xlabel="minutes")
    for ax in axes.flat:
        faults(ax, data)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def latency(data: dict[str, Any], out: Path) -> None:
    windows = data["latency_windows"]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    x = [w["from_min"] for w in windows]
    ax.plot(x, [w["p50_s"] for w in windows], marker="o", label="p50")
    ax.plot(x, [w["p99_s"] for w in windows], marker="o", label="p99")
    faults(ax, data)
    ax.set(title="submitted -> settled (s), by 5-minute window", xlabel="minutes", ylabel="seconds")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main(results: str) -> None:
    root = Path(results)
    data = json.loads((root / "samples.json").read_text())
    written: dict[str, Callable[[Path], None]] = {
        "rss.png": lambda p: per_process(data, "rss_mib", "RSS per process", "MiB", p),
        "fds.png": lambda p: per_process(data, "fds", "open file descriptors per process", "fds", p),
        "totals.png": lambda p: totals(data, p),
        "latency.png": lambda p: latency(data, p),
    }
    for name, draw in written.items():
        draw(root / name)
    print(" ".join(written))


if __name__ == "__main__":
    main(sys.argv[1])
