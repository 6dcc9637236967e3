"""``chorus rollout``: run a new release of a service beside the current one, send it a
share of new workflows, then promote it or roll it back.

``repin`` moves one in-flight workflow to another release when a canary must go before
its workflows end. Every command calls the rollout service's HTTP API (``--url``, else CHORUS_ROLLOUT_URL,
else http://127.0.0.1:8121) with your API key; changes need an operator's key and record
its principal. A workflow stays on the release it started on whatever changes later:
``status`` shows each release's in-flight workflows, so you know when an old one has
drained and can be stopped.

Exit codes: 0 ok; 1 refused (no canary to promote, one already running, a move the owning
release refused); 2 bad input; 69 the rollout service is unreachable; 75 a move asked for
and not answered within --wait; 77 the key may not do this.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.console import Console

from chorus.contracts.api.outcome_analytics import Releases
from chorus.contracts.api.rollout_service import (
    InFlight,
    PolicyChanged,
    Repin,
    RepinAsked,
    RepinBody,
    RolloutState,
)
from chorus.contracts.rollouts import RolloutChanged
from chorus.tools.cli.options import ApiCall, HttpApi, api_command, echo_json, table_of

API = HttpApi("the rollout service", "CHORUS_ROLLOUT_URL", "http://127.0.0.1:8121", "The rollout service.")
ANALYTICS = HttpApi(
    "outcome analytics", "CHORUS_ANALYTICS_URL", "http://127.0.0.1:8104", "Outcome analytics."
)
NO_ANSWER_YET = 75
"""EX_TEMPFAIL: asked, and the owning release has not answered yet (look again with status)."""

app = typer.Typer(
    name="rollout",
    help="Versioned rollouts: canary, shift, promote, roll back, and releases side by side.",
    no_args_is_help=True,
)
console = Console(highlight=False)

Service = Annotated[str, typer.Argument(help="The service (its name in the registry).")]
Reason = Annotated[str | None, typer.Option("--reason", help="Why, for the rollout's history.")]
Percent = Annotated[float, typer.Option("--percent", min=0, max=100, help="Share of new workflows (0-100).")]


def _change(call: ApiCall, service: str, action: str, body: dict[str, Any]) -> None:
    """Ask for a change (the body as the API's request model names its fields; the API
    validates it) and say the policy now in force."""
    answer = call.answer(PolicyChanged, "POST", f"/v1/rollouts/{service}/{action}", json=body)
    if call.printed(answer):
        return
    typer.echo(_policy_line(answer.policy))


def _policy_line(p: RolloutChanged) -> str:
    if p.status == "canary":
        scope = f" of {', '.join(p.workflow_types)}" if p.workflow_types else ""
        where = f"canary {p.canary} takes {p.percent:g}% of new workflows{scope}, stable {p.stable}"
    elif p.status == "promoted":
        where = f"promoted: new workflows go to {p.stable}"
    else:
        where = f"rolled back: new workflows go to {p.stable} ({p.canary} finishes what it has)"
    rule = p.auto_rollback
    guard = ""
    if rule and p.status == "canary":
        margin, least = rule.failure_margin, rule.min_workflows
        guard = f"; rolls back by itself past +{margin:.0%} failures (judged from {least} workflows)"
    return f"{p.service} r{p.revision}: {where}{guard}"


@api_command(app, "start", API, json_flag=False)
def start_command(
    call: ApiCall,
    service: Service,
    canary: Annotated[str, typer.Option("--canary", help="The release to try (its CHORUS_RELEASE).")],
    percent: Percent,
    stable: Annotated[
        str | None,
        typer.Option("--stable", help="The release serving today (default: the last stable, or main)."),
    ] = None,
    workflow_type: Annotated[
        list[str] | None, typer.Option("--workflow-type", help="Only workflows of this type (repeatable).")
    ] = None,
    max_failure_increase: Annotated[
        float | None,
        typer.Option(
            "--auto-rollback",
            min=0,
            max=1,
            help="Roll back by itself when the canary's failure rate exceeds stable's by this (0.1: +10%).",
        ),
    ] = None,
    max_dead_letter_increase: Annotated[
        float, typer.Option("--dead-letter-margin", min=0, max=1, help="The same for dead letters.")
    ] = 1.0,
    min_workflows: Annotated[
        int,
        typer.Option("--min-workflows", min=1, help="Judge only after this many canary workflows settled."),
    ] = 20,
    reason: Reason = None,
) -> None:
    """Start a canary: a share of new workflows is pinned to the canary release."""
    body: dict[str, Any] = {"canary": canary, "percent": percent, "reason": reason}
    if stable:
        body["stable"] = stable
    if workflow_type:
        body["workflow_types"] = workflow_type
    if max_failure_increase is not None:
        body["auto_rollback"] = {
            "failure_margin": max_failure_increase,
            "dead_letter_margin": max_dead_letter_increase,
            "min_workflows": min_workflows,
        }
    _change(call, service, "start", body)


@api_command(app, "set", API, json_flag=False)
def set_command(call: ApiCall, service: Service, percent: Percent, reason: Reason = None) -> None:
    """Shift the canary's share of new workflows (workflows started before stay where they are)."""
    _change(call, service, "set", {"percent": percent, "reason": reason})


@api_command(app, "promote", API, json_flag=False)
def promote_command(call: ApiCall, service: Service, reason: Reason = None) -> None:
    """New workflows go to the canary release; the old one finishes what is pinned to it."""
    _change(call, service, "promote", {"reason": reason})


@api_command(app, "rollback", API, json_flag=False)
def rollback_command(call: ApiCall, service: Service, reason: Reason = None) -> None:
    """New workflows go back to stable; the canary finishes what is pinned to it."""
    _change(call, service, "rollback", {"reason": reason})


@api_command(app, "workflows", API)
def workflows_command(
    call: ApiCall,
    service: Service,
    release: Annotated[str, typer.Option("--release", help="The release whose in-flight workflows to list.")],
) -> None:
    """The in-flight workflows pinned to a release (oldest first): what `repin` may move."""
    answer = call.answer(InFlight, "GET", f"/v1/rollouts/{service}/workflows", params={"release": release})
    if call.printed(answer):
        return
    for workflow_id in answer.workflows:
        typer.echo(workflow_id)
    typer.echo(f"{answer.count} in flight on {release}", err=True)


@api_command(app, "repin", API, json_flag=False)
def repin_command(
    call: ApiCall,
    service: Service,
    workflow_id: Annotated[str, typer.Argument(help="The in-flight workflow to move.")],
    to: Annotated[
        str, typer.Option("--to", help="The release to move it to: the rollout's stable or canary.")
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why, for the audit of moves (required).")],
    wait: Annotated[
        float, typer.Option("--wait", min=0, help="Seconds to wait for the owning release's answer.")
    ] = 30.0,
) -> None:
    """Move one in-flight workflow to another release (a canary removed before its workflows
    end). The release that owns it hands it over once nothing of it is in flight there, or
    refuses and says why (exit 1): ask again a moment later."""
    with call.client() as client:
        path = f"/v1/rollouts/{service}/workflows/{workflow_id}/repin"
        body = RepinBody.model_construct(to=to, reason=reason).model_dump(mode="json")
        asked = client.answer(RepinAsked, "POST", path, json=body)
        found: Repin | None = None
        deadline = time.monotonic() + wait
        while (found is None or found.outcome == "pending") and time.monotonic() < deadline:
            time.sleep(0.5)
            found = client.answer(Repin, "GET", asked.location)
    outcome = found.outcome if found is not None else "pending"
    if call.as_json:
        echo_json(found if found is not None else {**asked.model_dump(mode="json"), "outcome": outcome})
    elif found is not None and outcome != "pending":
        typer.echo(_repin_line(found))
    else:
        typer.echo(f"asked ({asked.request_id}); no answer yet: see `chorus rollout status {service}`")
    if outcome == "refused":
        raise typer.Exit(1)
    if outcome == "pending":
        raise typer.Exit(NO_ANSWER_YET)


def _repin_line(r: Repin) -> str:
    moved = f"{r.workflow_id} {r.from_release or '?'} -> {r.to_release}"
    if r.outcome == "refused":
        return f"{moved}: refused by {r.answered_by}: {r.refusal}"
    return f"{moved}: {r.outcome}"


@api_command(app, "status", API)
def status_command(
    call: ApiCall,
    service: Service,
) -> None:
    """Each release side by side: in-flight workflows, completion and failure rates, failures
    by category, step latency; then the rollout's history."""
    answer = call.answer(RolloutState, "GET", f"/v1/rollouts/{service}")
    if call.printed(answer):
        return
    policy = answer.policy
    typer.echo(
        _policy_line(policy) if policy else f"{service}: no rollout (one release takes every workflow)"
    )
    table = table_of(
        "release", "role", "running", "in flight", "ended", "completed", "failed", "failures", "p50", "p99"
    )
    for r in answer.releases:
        table.add_row(
            r.release,
            r.role,
            f"{r.replicas} replica(s)" if r.running else "no",
            str(r.in_flight),
            str(r.ended),
            _rate(r.completion_rate),
            _rate(r.failure_rate),
            ", ".join(f"{k} {v}" for k, v in r.failures_by_category.items()) or "-",
            _ms(r.p50_ms),
            _ms(r.p99_ms),
        )
    console.print(table)
    for change in answer.history[:10]:
        why = f": {change.reason}" if change.reason else ""
        typer.echo(f"{change.at.isoformat()[:19]}  r{change.revision} {change.action} by {change.actor}{why}")
    for move in answer.repins[:10]:
        typer.echo(f"{move.requested_at.isoformat()[:19]}  repin by {move.requested_by}: {_repin_line(move)}")


@api_command(app, "outcomes", ANALYTICS)
def outcomes_command(
    call: ApiCall,
    service: Service,
) -> None:
    """How the workflows pinned to each release ended (outcome analytics): side by side."""
    answer = call.answer(Releases, "GET", "/analytics/releases", params={"service": service})
    if call.printed(answer):
        return
    table = table_of(
        "release", "type", "started", "completed", "other ends", "escalated", "dead letters", "p50", "p99"
    )
    for r in answer.releases:
        others = ", ".join(f"{k} {v}" for k, v in r.ended.items() if v and k != "completed") or "-"
        duration = r.duration_s
        table.add_row(
            r.release,
            r.workflow_type,
            str(r.started),
            f"{r.ended.get('completed', 0)} ({_rate(r.completion_rate)})",
            others,
            str(r.escalated),
            str(sum(r.dead_lettered.values())),
            f"{duration.p50:.1f} s" if duration.p50 is not None else "-",
            f"{duration.p99:.1f} s" if duration.p99 is not None else "-",
        )
    console.print(table)


def _rate(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "-"


def _ms(value: float | None) -> str:
    return f"{value:.1f} ms" if value is not None else "-"
