"""``chorus policy``: the approval policy, through the gateway's API.

``show`` the rules in force, ``set FILE --reason ...`` a new version from a JSON file
(``{"rules": [...]}``, as ``show --json`` prints it), ``history`` every version with
who changed it and why. A change applies to the next approval, without a restart.

``--url`` (else CHORUS_GATEWAY_URL, else http://127.0.0.1:8080) and your API key
(``--api-key``, else CHORUS_API_KEY): an operator's to change, an auditor's to read.
Exit codes: 0 ok; 1 refused; 2 bad input (a rule the policy cannot take, named);
69 the gateway (or the approval gate behind it) is unreachable; 77 key or role refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from chorus.contracts.api.approval_gate import ApprovalPolicyHistory, ApprovalPolicyVersion
from chorus.contracts.approvals import PolicyRule
from chorus.tools.cli.options import GATEWAY, ApiCall, api_command, fail

app = typer.Typer(name="policy", help="The approval policy: show, set, history.", no_args_is_help=True)


@api_command(app, "show", GATEWAY)
def show_command(call: ApiCall) -> None:
    """The policy in force: its version and rules, in the order they are tried."""
    answer = call.answer(ApprovalPolicyVersion, "GET", "/v1/approval-policy")
    if call.printed(answer):
        return
    changed = f"{answer.changed_by} at {answer.changed_at.isoformat()[:19]}"
    typer.echo(f"version {answer.version} by {changed}: {answer.reason}")
    for n, rule in enumerate(answer.rules, start=1):
        typer.echo(f"{n}. {_rule_line(rule)}")
    typer.echo("otherwise: the chain the requesting service asks for")


@api_command(app, "set", GATEWAY)
def set_command(
    call: ApiCall,
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help='JSON: {"rules": [...]}')],
    reason: Annotated[str, typer.Option("--reason", help="Why (required; kept with the version).")],
) -> None:
    """Make the rules in FILE the next version of the policy."""
    try:
        document = json.loads(file.read_text())
    except ValueError as exc:
        fail("policy", f"{file}: not JSON ({exc})", 2)
    rules = document.get("rules") if isinstance(document, dict) else None
    if not isinstance(rules, list):
        fail("policy", f'{file}: expected {{"rules": [...]}}', 2)
    body = {"rules": rules, "reason": reason}  # the gate names what its rules cannot take
    answer = call.answer(ApprovalPolicyVersion, "PUT", "/v1/approval-policy", json=body)
    if call.printed(answer):
        return
    typer.echo(f"approval policy version {answer.version} in force ({len(answer.rules)} rules)")


@api_command(app, "history", GATEWAY)
def history_command(
    call: ApiCall, limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 20
) -> None:
    """Every version, newest first: who changed the policy, when and why."""
    answer = call.answer(ApprovalPolicyHistory, "GET", "/v1/approval-policy/history", params={"limit": limit})
    if call.printed(answer):
        return
    for v in answer.versions:
        at = v.changed_at.isoformat()[:19]
        typer.echo(f"{v.version:>4}  {at}  {v.changed_by}: {v.reason} ({len(v.rules)} rules)")


def _rule_line(rule: PolicyRule) -> str:
    shown = rule.model_dump(mode="json")
    scope = [f"{k}={shown[k]}" for k in ("workflow_type", "business_unit", "requested_by") if shown.get(k)]
    when = [f"{k}={v}" for k, v in (shown.get("when") or {}).items() if v not in (None, [])]
    chain = " -> ".join(f"{s.tier} ({s.window_s / 3600:g} h)" for s in rule.chain)
    return f"{rule.name}: {' '.join(scope + when) or 'every approval'} => {chain}, then {rule.fallback}"
