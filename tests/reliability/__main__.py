"""``python -m tests.reliability``: the full suite (``make test-reliability``).

Runs every scenario of :func:`tests.reliability.scenarios.full`, deployment by
deployment (private Kafka clusters and a private PostgreSQL are started for the
scenarios that break them, and stopped after), writes report.md and report.json to
.local/reliability-results/<timestamp>/, prints the table, and ends with one line:

    scenarios=N workflows=M faults=K lost=0 duplicate_effects=0 stuck=0

Exit status 0 when every scenario kept every invariant, 1 otherwise.
``--only NAME`` (repeatable) runs some scenarios; ``--short`` the short suite's.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import sys
import time
from pathlib import Path

from tests.reliability.deployment import Deployment, DeploymentConfig
from tests.reliability.report import (
    ScenarioResult,
    markdown_table,
    new_results_dir,
    summary_line,
    write_report,
)
from tests.reliability.scenarios import SHORT, Scenario, deployments, full, run_control, run_scenario

log = logging.getLogger("reliability")


def setup_logging(results_dir: Path) -> None:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    to_file = logging.FileHandler(results_dir / "run.log")
    to_file.setFormatter(fmt)
    to_console = logging.StreamHandler(sys.stderr)
    to_console.setFormatter(fmt)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(to_file)
    root.addHandler(to_console)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # reconnect chatter during broker faults
    logging.getLogger("httpx").setLevel(logging.WARNING)


async def run_deployment(
    config: DeploymentConfig,
    scenarios: list[Scenario],
    results_dir: Path,
    seed: int,
    described: dict[str, str],
) -> list[ScenarioResult]:
    """Start the deployment (and its private infrastructure), run its scenarios, stop it;
    ``described`` gets what the deployment turned out to be."""
    results: list[ScenarioResult] = []
    deployment = Deployment(config, results_dir)
    try:
        await deployment.start_infrastructure()
        log.info(
            "starting deployment %s (kafka %s, postgres %s)",
            config.name,
            config.kafka.label,
            config.postgres.label,
        )
        described[config.name] = config.describe()
        await deployment.start()
        described[config.name] += f"; {deployment.topology}"
        for scenario in scenarios:
            results.append(await run_scenario(deployment, scenario, seed))
        # Negative controls last: each breaks the deployment on purpose.
        for scenario, result in zip(scenarios, results, strict=True):
            if scenario.control is not None:
                await run_control(deployment, scenario, result, seed)
    except Exception as exc:
        log.exception("deployment %s failed", config.name)
        done = {r.name for r in results}
        for scenario in scenarios:
            if scenario.name not in done:
                results.append(_harness_failure(scenario, config.name, exc))
    finally:
        passed = all(r.ok for r in results)
        try:
            await deployment.stop(clean=passed)
        finally:
            await deployment.stop_infrastructure()
    return results


def _harness_failure(scenario: Scenario, deployment: str, exc: BaseException) -> ScenarioResult:
    return ScenarioResult(
        name=scenario.name,
        description=scenario.description,
        deployment=deployment,
        workflows=0,
        faults=0,
        faults_by_kind={},
        lost=0,
        duplicate_effects=0,
        stuck=0,
        wrong=0,
        max_recovery_s=None,
        checks={"deployment": "did not run"},
        violations=[f"deployment {deployment} failed before this scenario ran: {exc!r}"],
    )


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability", description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", default=[], help="run only this scenario (repeatable)")
    parser.add_argument("--short", action="store_true", help="the short suite's scenarios")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    args = parser.parse_args(argv)
    scenarios = SHORT if args.short else full()
    if args.only:
        unknown = set(args.only) - {s.name for s in scenarios}
        if unknown:
            parser.error(f"unknown scenario(s) {sorted(unknown)}; known: {[s.name for s in scenarios]}")
        scenarios = [s for s in scenarios if s.name in args.only]
    results_dir = new_results_dir("short" if args.short else "")
    setup_logging(results_dir)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    configs = deployments()
    order = list(dict.fromkeys(s.deployment for s in scenarios))
    results: list[ScenarioResult] = []
    described: dict[str, str] = {}
    clock = time.monotonic()
    for name in order:
        mine = [s for s in scenarios if s.deployment == name]
        results += await run_deployment(configs[name], mine, results_dir, args.seed, described)
    meta = {
        "deployments": described,
        "started": started,
        "machine": f"{platform.node()}, {platform.machine()}, python {platform.python_version()}",
        "seed": args.seed,
        "duration_s": round(time.monotonic() - clock, 1),
        "results_dir": str(results_dir),
    }
    path = write_report(results_dir, results, title="Chorus reliability suite", meta=meta)
    print()
    print(markdown_table(results))
    for result in results:
        if not result.ok:
            print(result.failure_message())
    print(f"report: {path} ({meta['duration_s']:.0f}s)")
    print(summary_line(results))
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
