"""results.json, results.md and the one-line summary of a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Issue 16's targets for R5: one workflow at a time, and a closed loop of 32 in flight.
R5_P50_MS, R5_P99_MS = 12, 25
CLOSED_PER_S, CLOSED_P99_MS = 250, 150
# And against Restate, each a ratio Chorus/Restate per round: one at a time p50 <= 0.8x and
# p99 <= 1x Restate's, closed-loop workflows/s >= 3x Restate's.
VS_RESTATE_P50, VS_RESTATE_P99, VS_RESTATE_CLOSED = 0.8, 1.0, 3.0


def _m(s: dict[str, Any], fmt: str = "{:.2f}") -> str:
    """median [min-max] of a summary()."""
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}-{fmt.format(s['max'])}]"


def _yes(ok: bool) -> str:
    return "**yes**" if ok else "**no**"


def verdicts(r: dict[str, Any]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    if "R2" in r:
        out["R2"] = r["R2"]["ratio"]["median"] >= 0.8
    if "R3" in r:
        out["R3"] = r["R3"]["ratio"]["median"] >= 0.9
    if "R4" in r:
        out["R4"] = r4_tax(r, "p50") <= 2.0 and r4_tax(r, "p99") <= 10.0
    if "R5" in r:
        x = r["R5"]
        out["R5"] = x["ratio"]["median"] >= 1.5 and x["p50_diff_ms"]["median"] <= 0
        out["R5_p50"] = x["chorus"]["p50_ms"]["median"] <= R5_P50_MS and x["p50_diff_ms"]["median"] <= 0
        out["R5_p99"] = x["chorus"]["p99_ms"]["median"] <= R5_P99_MS
        if "closed" in x:
            c = x["closed"]["chorus"]
            out["R5_closed_per_s"] = c["per_s"]["median"] >= CLOSED_PER_S
            out["R5_closed_p99"] = c["p99_ms"]["median"] <= CLOSED_P99_MS
        if "restate" in x.get("vs", {}):
            v = x["vs"]["restate"]
            out["R5_vs_restate_p50"] = v["p50"]["median"] <= VS_RESTATE_P50
            out["R5_vs_restate_p99"] = v["p99"]["median"] <= VS_RESTATE_P99
            out["R5_vs_restate_closed"] = v["closed_per_s"]["median"] >= VS_RESTATE_CLOSED
    if "timers" in r:
        out["timers"] = r["timers"]["lateness_ms"]["p99"] <= 250
    if "parked" in r:
        out["parked"] = all(v < 100 for v in r["parked"]["rss_growth_bytes_per_workflow"].values())
    return out


def r4_tax(r: dict[str, Any], q: str) -> float:
    """The worse of the two conditions (one in flight, 50% load): both must meet the target."""
    return max(float(r["R4"][c]["tax"][q]["median"]) for c in ("inflight", "load"))


def summary_line(r: dict[str, Any]) -> str:
    def val(key: str, get: Any, fmt: str) -> str:
        return fmt.format(get()) if key in r else "NA"

    closed = r.get("R5", {}).get("closed", {}).get("chorus", {})
    sealed = r.get("R5", {}).get("sealed", {})

    def val5(get: Any, fmt: str) -> str:
        """An R5-with-encryption value; NA from a run (an older one) that did not measure it."""
        return fmt.format(get()) if sealed else "NA"

    restate = r.get("R5", {}).get("vs", {}).get("restate", {})

    def vs_restate(key: str) -> str:
        """Chorus over Restate (R5, per round); NA from a run without Restate."""
        return f"{restate[key]['median']:.2f}" if restate else "NA"

    return " ".join(
        [
            "R2=" + val("R2", lambda: r["R2"]["ratio"]["median"], "{:.2f}"),
            "R3=" + val("R3", lambda: r["R3"]["ratio"]["median"], "{:.2f}"),
            "R4_p50_ms=" + val("R4", lambda: r4_tax(r, "p50"), "{:.2f}"),
            "R4_p99_ms=" + val("R4", lambda: r4_tax(r, "p99"), "{:.2f}"),
            "R5=" + val("R5", lambda: r["R5"]["ratio"]["median"], "{:.2f}"),
            # One workflow at a time, end to end: the latency issue 16 brings down.
            "R5_p50_ms=" + val("R5", lambda: r["R5"]["chorus"]["p50_ms"]["median"], "{:.1f}"),
            "R5_p99_ms=" + val("R5", lambda: r["R5"]["chorus"]["p99_ms"]["median"], "{:.1f}"),
            # 32 in flight, each end starting the next: throughput and tail a client sees.
            "R5_closed_per_s=" + val("R5", lambda: closed["per_s"]["median"], "{:.0f}"),
            "R5_closed_p99_ms=" + val("R5", lambda: closed["p99_ms"]["median"], "{:.1f}"),
            "timer_p99_ms=" + val("timers", lambda: r["timers"]["lateness_ms"]["p99"], "{:.0f}"),
            # R5 with encryption on beside R5 as above (same run, same rounds); the ratio is
            # sealed/plain workflows/s, per round.
            "R5_per_s=" + val("R5", lambda: r["R5"]["chorus"]["per_s"]["median"], "{:.1f}"),
            "R5_sealed_per_s=" + val5(lambda: sealed["per_s"]["median"], "{:.1f}"),
            "R5_sealed_p50_ms=" + val5(lambda: sealed["p50_ms"]["median"], "{:.1f}"),
            "R5_sealed_p99_ms=" + val5(lambda: sealed["p99_ms"]["median"], "{:.1f}"),
            "R5_sealed_ratio=" + val5(lambda: sealed["ratio"]["median"], "{:.2f}"),
            # The no-op hop with both events signed over unsigned, messages/s per round.
            "signed_hop_ratio=" + val("signing", lambda: r["signing"]["ratio"]["median"], "{:.2f}"),
            # Chorus over Restate, per round: workflows/s of the backlog, one-at-a-time p50 and
            # p99 (below 1: Chorus is faster), closed-loop workflows/s.
            "R5_vs_restate=" + vs_restate("per_s"),
            "R5_p50_vs_restate=" + vs_restate("p50"),
            "R5_p99_vs_restate=" + vs_restate("p99"),
            "R5_closed_vs_restate=" + vs_restate("closed_per_s"),
        ]
    )


def restate_rows(x: dict[str, Any], ok: dict[str, bool]) -> list[str]:
    """R5's rows against Restate: Chorus, Restate, the per-round ratio, its target."""
    v, c = x["vs"]["restate"], x["closed"]
    return [
        f"| R5 workflows/s (5 steps), vs Restate | {_m(x['chorus']['per_s'], '{:.1f}')} "
        f"| Restate {_m(x['restate']['per_s'], '{:.1f}')} | ratio {_m(v['per_s'])} | - | - |",
        f"| R5 p50 latency, one at a time, vs Restate (ms) | {_m(x['chorus']['p50_ms'], '{:.1f}')} "
        f"| Restate {_m(x['restate']['p50_ms'], '{:.1f}')} | ratio {_m(v['p50'])} "
        f"| ≤ {VS_RESTATE_P50}x | {_yes(ok['R5_vs_restate_p50'])} |",
        f"| R5 p99 latency, one at a time, vs Restate (ms) | {_m(x['chorus']['p99_ms'], '{:.1f}')} "
        f"| Restate {_m(x['restate']['p99_ms'], '{:.1f}')} | ratio {_m(v['p99'])} "
        f"| ≤ {VS_RESTATE_P99:.0f}x | {_yes(ok['R5_vs_restate_p99'])} |",
        f"| R5 closed loop, 32 in flight: workflows/s, vs Restate | {_m(c['chorus']['per_s'], '{:.0f}')} "
        f"| Restate {_m(c['restate']['per_s'], '{:.0f}')} | ratio {_m(v['closed_per_s'])} "
        f"| ≥ {VS_RESTATE_CLOSED:.0f}x | {_yes(ok['R5_vs_restate_closed'])} |",
        f"| R5 closed loop, 32 in flight: p50 / p99, vs Restate (ms) "
        f"| {_m(c['chorus']['p50_ms'], '{:.1f}')} / {_m(c['chorus']['p99_ms'], '{:.1f}')} "
        f"| Restate {_m(c['restate']['p50_ms'], '{:.1f}')} / {_m(c['restate']['p99_ms'], '{:.1f}')} "
        "| - | - | - |",
    ]


def markdown(r: dict[str, Any], line: str) -> str:
    ok = verdicts(r)
    env = r.get("environment", {})
    lines = [
        f"# Chorus bench ({r['mode']}, {r['started_at']}, {r['duration_s']:.0f} s)",
        "",
        f"`{line}`",
        "",
    ]
    if "failed_section" in r:
        failed = r["failed_section"]
        lines += [
            f"**This run failed in section `{failed['section']}`: {failed['error']}**; "
            "the results below are those of the sections before it.",
            "",
        ]
    lines += [
        "Each value: median [min-max] over interleaved rounds "
        f"({r['sizes']['rounds']} rounds; ratios are computed per round, then the median).",
        "",
        "| Measure | Chorus | Baseline | Result | Target | Met |",
        "|---|---|---|---|---|---|",
    ]
    if "R1" in r:
        lines.append(f"| R1 raw loop msg/s | - | {_m(r['R1'], '{:.0f}')} | - | ceiling | - |")
    if "R4" in r:
        raw = r["R4"]["inflight"]["raw"]
        lines.append(
            f"| R1 raw loop hop latency, one in flight (ms) | - | p50 {_m(raw['p50'])}, "
            f"p99 {_m(raw['p99'])} | - | floor | - |"
        )
    if "R2" in r:
        x = r["R2"]
        lines.append(
            f"| R2 no-op handler msg/s | {_m(x['chorus'], '{:.0f}')} | {_m(r['R1'], '{:.0f}')} "
            f"| ratio {_m(x['ratio'])} | ≥ 0.8 | {_yes(ok['R2'])} |"
        )
    if "R3" in r:
        x = r["R3"]
        lines.append(
            f"| R3 durable hop msg/s | {_m(x['chorus'], '{:.0f}')} | {_m(x['baseline'], '{:.0f}')} "
            f"| ratio {_m(x['ratio'])} | ≥ 0.9 | {_yes(ok['R3'])} |"
        )
    if "R4" in r:
        for cond, label in (
            ("inflight", "one in flight"),
            ("load", f"{r['R4']['rate_per_s']:.0f}/s (50%)"),
        ):
            c = r["R4"][cond]
            for q in ("p50", "p99"):
                limit = 2 if q == "p50" else 10
                met = c["tax"][q]["median"] <= limit
                lines.append(
                    f"| R4 {q} latency, {label} (ms) | {_m(c['chorus'][q])} | {_m(c['raw'][q])} "
                    f"| tax {_m(c['tax'][q])} | ≤ +{limit} ms | {_yes(met)} |"
                )
    if "R4" in r and "chorus_handle_ms" in r["R4"]["load"]:
        h = r["R4"]["load"]["chorus_handle_ms"]
        lines.append(
            f"| R4 of which Chorus read-to-commit (ms, at 50% load) | p50 {_m(h['p50'])}, "
            f"p99 {_m(h['p99'])} | - | histogram bucket bounds; rest = relay + Kafka | - | - |"
        )
        u = r["R4"]["load"]["cpu_utilization"]
        lines.append(
            f"| R4 CPU of the process at 50% load (share of one core) | {_m(u['chorus'])} "
            f"| {_m(u['raw'])} | - | - | - |"
        )
    if "R5" in r:
        x = r["R5"]
        lines.append(
            f"| R5 workflows/s (5 steps) | {_m(x['chorus']['per_s'], '{:.1f}')} "
            f"| DBOS {_m(x['dbos']['per_s'], '{:.1f}')} | ratio {_m(x['ratio'])} | ≥ 1.5 "
            f"| {_yes(x['ratio']['median'] >= 1.5)} |"
        )
        for q, limit in (("p50_ms", R5_P50_MS), ("p99_ms", R5_P99_MS)):
            extra = f"diff {_m(x['p50_diff_ms'], '{:.1f}')}" if q == "p50_ms" else "-"
            target = f"≤ {limit} ms" + (", no worse than DBOS" if q == "p50_ms" else "")
            lines.append(
                f"| R5 workflow {q[:3]} latency, one at a time (ms) | {_m(x['chorus'][q], '{:.1f}')} "
                f"| DBOS {_m(x['dbos'][q], '{:.1f}')} | {extra} | {target} | {_yes(ok['R5_' + q[:3]])} |"
            )
        if "closed" in x:
            c = x["closed"]
            lines.append(
                f"| R5 closed loop, 32 in flight: workflows/s | {_m(c['chorus']['per_s'], '{:.0f}')} "
                f"| DBOS {_m(c['dbos']['per_s'], '{:.0f}')} | - | ≥ {CLOSED_PER_S} "
                f"| {_yes(ok['R5_closed_per_s'])} |"
            )
            for q in ("p50_ms", "p99_ms"):
                target, met = (
                    (f"≤ {CLOSED_P99_MS} ms", _yes(ok["R5_closed_p99"])) if q == "p99_ms" else ("-", "-")
                )
                lines.append(
                    f"| R5 closed loop, 32 in flight: {q[:3]} (ms) | {_m(c['chorus'][q], '{:.1f}')} "
                    f"| DBOS {_m(c['dbos'][q], '{:.1f}')} | - | {target} | {met} |"
                )
    if "R5" in r and "restate" in r["R5"]:
        lines += restate_rows(r["R5"], ok)
    if "R5" in r and "sealed" in r["R5"]:
        x, plain = r["R5"]["sealed"], r["R5"]["chorus"]
        lines.append(
            f"| R5 sealed: workflows/s, personal data opened and sealed at each step "
            f"| {_m(x['per_s'], '{:.1f}')} | plain {_m(plain['per_s'], '{:.1f}')} "
            f"| ratio {_m(x['ratio'])} | - | - |"
        )
        for q in ("p50_ms", "p99_ms"):
            lines.append(
                f"| R5 sealed: workflow {q[:3]} latency, one at a time (ms) | {_m(x[q], '{:.1f}')} "
                f"| plain {_m(plain[q], '{:.1f}')} | diff {_m(x[q[:3] + '_diff_ms'], '{:.1f}')} | - | - |"
            )
        c, pc = x["closed"], r["R5"]["closed"]["chorus"]
        lines.append(
            f"| R5 sealed: closed loop, 32 in flight: workflows/s | {_m(c['per_s'], '{:.0f}')} "
            f"| plain {_m(pc['per_s'], '{:.0f}')} | ratio {_m(c['ratio'])} | - | - |"
        )
    if "signing" in r:
        g = r["signing"]
        cpu = g["service_cpu_us_per_message"]
        lines.append(
            f"| Signing: no-op hop, both events signed: messages/s | {_m(g['B'], '{:.0f}')} "
            f"| unsigned {_m(g['A'], '{:.0f}')} | ratio {_m(g['ratio'])}; service CPU/message "
            f"{cpu['B']['median']:.0f} vs {cpu['A']['median']:.0f} µs | - | - |"
        )
    if "timers" in r:
        t = r["timers"]
        lines.append(
            f"| Timers: {t['timers']} scheduled | {t['schedule_per_s']:.0f} scheduled/s | - "
            f"| lateness p50 {t['lateness_ms']['p50']:.0f} ms, "
            f"p99 {t['lateness_ms']['p99']:.0f} ms "
            f"| p99 ≤ 250 ms | {_yes(ok['timers'])} |"
        )
    if "parked" in r:
        p = r["parked"]
        growth = ", ".join(f"{k} {v:.0f} B" for k, v in p["rss_growth_bytes_per_workflow"].items())
        lines.append(
            f"| Parked: {p['workflows']} workflows | RSS growth per workflow: {growth} | - "
            f"| {p['postgres_bytes_per_workflow']:.0f} B of PostgreSQL per workflow "
            f"| RSS flat | {_yes(ok['parked'])} |"
        )
    if "cpu" in r:
        c = r["cpu"]
        lines += [
            "",
            "## CPU per workflow step (ms, R5 throughput trials)",
            "",
            "| | service | PostgreSQL (our backends) | broker | whole machine |",
            "|---|---|---|---|---|",
        ]
        for name in ("chorus", "sealed", "dbos", "restate"):
            if name not in c:
                continue  # sealed, restate: not in runs before they were measured
            x = c[name]
            lines.append(
                f"| {name} | {_m(x['service'])} | {_m(x['postgres'])} | {_m(x['broker'])} "
                f"| {_m(x['machine_busy'])} |"
            )
        lines += ["", f"_{c['note']}_"]
    if "R3" in r:
        c = r["R3"]["cpu_ms_per_msg"]
        lines += [
            "",
            "R3 CPU per message (ms): "
            f"raw loop {_m(c['raw'], '{:.3f}')} + PostgreSQL {_m(c['postgres_raw'], '{:.3f}')}; "
            f"Chorus {_m(c['chorus'], '{:.3f}')} + PostgreSQL {_m(c['postgres_chorus'], '{:.3f}')}",
        ]
    if "R5" in r and "sealed" in r["R5"]:
        lines += ["", f"R5 sealed: {r['R5']['sealed']['what']}."]
    if "R5" in r and "breakdown" in r["R5"]:
        bd = r["R5"]["breakdown"]
        lines += [
            "",
            f"## Where one hop goes (R5 one at a time, {bd['hops']} hops, ms)",
            "",
            "| stage | p50 | p99 |",
            "|---|---|---|",
        ]
        lines += [f"| {k} | {v['p50']:.2f} | {v['p99']:.2f} |" for k, v in bd["segments"].items()]
        lines += ["", f"Sum of the serial stages' p50: {bd['serial_p50_sum_ms']:.2f} ms"]
    if "R5" in r and "flame_graph" in r["R5"]:
        fg = r["R5"]["flame_graph"]
        lines += [
            "",
            f"Flame graph of the flow service in a closed-loop trial: `{fg['file']}` "
            f"(py-spy; {fg['closed_loop_per_s_under_profiler']:.0f} workflows/s under the profiler)",
        ]
    if "ab" in r:
        x = r["ab"]
        lines += [
            "",
            f"## Same-run A/B: {x['what']}",
            "",
            f"B - A per round (ms): p50 {_m(x['B_minus_A_ms']['p50'])}, p99 {_m(x['B_minus_A_ms']['p99'])}",
            "",
            f"Closed loop of 32 in flight, workflows/s: A {_m(x['A']['closed_per_s'], '{:.0f}')}, "
            f"B {_m(x['B']['closed_per_s'], '{:.0f}')}; A/B per round {_m(x['closed_A_over_B'], '{:.2f}')}",
            "",
            "| stage (p50 ms) | A | B |",
            "|---|---|---|",
            f"| workflow (5 steps) | {_m(x['A']['p50'], '{:.1f}')} | {_m(x['B']['p50'], '{:.1f}')} |",
        ]
        a, bb = x["A"]["breakdown"]["segments"], x["B"]["breakdown"]["segments"]
        lines += [
            f"| {k} | {v['p50']:.2f} | {bb[k]['p50']:.2f} |" if k in bb else f"| {k} | {v['p50']:.2f} | - |"
            for k, v in a.items()
        ]
    if "timers" in r:
        t = r["timers"]
        lines += [
            "",
            "## Timers",
            "",
            f"- {t['timers']} timers, due evenly over {t['fire_spread_s']:.0f} s; all scheduled "
            f"before the first was due: {t['scheduled_before_first_due']}",
            f"- lateness at the target consumer: p50 {t['lateness_ms']['p50']:.1f} ms, "
            f"p99 {t['lateness_ms']['p99']:.1f} ms, max {t['lateness_ms']['max']:.1f} ms",
            f"- of which at the firing loop (fired_at - due_at): p50 "
            f"{t['lateness_at_firing_loop_ms']['p50']:.1f} ms, p99 "
            f"{t['lateness_at_firing_loop_ms']['p99']:.1f} ms; the rest is outbox relay + Kafka",
        ]
    if "parked" in r:
        p = r["parked"]
        lines += ["", "## Parked workflows: RSS (MB) of every service process", ""]
        names = list(p["snapshots"][0]["rss_mb"])
        lines.append("| parked | " + " | ".join(names) + " |")
        lines.append("|---" * (len(names) + 1) + "|")
        for snap in p["snapshots"]:
            lines.append(
                f"| {snap['parked']} | " + " | ".join(f"{snap['rss_mb'][n]:.1f}" for n in names) + " |"
            )
        lines += ["", "Largest tables after the run (MB, incl. indexes and earlier sections):", ""]
        for name, mb in list(p["tables_mb"].items())[:8]:
            lines.append(f"- {name}: {mb:.1f}")
    if "profile" in r:
        prof = r["profile"]
        lines += [
            "",
            f"## Profile of the Chorus durable hop (py-spy, {prof['samples']} samples, "
            f"{prof['throughput_under_profiler_per_s']:.0f} msg/s under the profiler)",
            "",
            "Where the time goes:",
            "",
        ]
        lines += [f"- {c['share']:.1%} {c['frame']}" for c in prof["categories"]]
        lines += ["", "Top frames by own time:", ""]
        lines += [f"- {c['share']:.1%} `{c['frame']}`" for c in prof["self"]]
        lines += ["", "Top frames by inclusive time:", ""]
        lines += [f"- {c['share']:.1%} `{c['frame']}`" for c in prof["inclusive"]]
    if env:
        lines += ["", "## Environment", ""]
        for k, v in env.items():
            lines.append(f"- {k}: {v}")
    lines += ["", "Sizes: " + ", ".join(f"{k}={v}" for k, v in r["sizes"].items())]
    return "\n".join(lines) + "\n"


def write_reports(out: Path, results: dict[str, Any]) -> str:
    line = summary_line(results)
    results["summary_line"] = line
    results["targets_met"] = verdicts(results)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (out / "results.md").write_text(markdown(results, line))
    return line
