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

from chorus_contracts.api.approval_gate import ApprovalPolicyHistory, ApprovalPolicyVersion
from chorus_contracts.approvals import PolicyRule
from chorus_tools.cli.options import (
    GATEWAY_URL,
    ApiKeyOption,
    Format,
    GatewayUrl,
    JsonFlag,
    OutputOption,
    api_answer,
    api_client,
    echo_json,
    fail,
    wants_json,
)

app = typer.Typer(name="policy", help="The approval policy: show, set, history.", no_args_is_help=True)


@app.command("show")
def show_command(
    api_key: ApiKeyOption = "",
    output: OutputOption = Format.TABLE,
    as_json: JsonFlag = False,
    url: GatewayUrl = GATEWAY_URL,
) -> None:
    """The policy in force: its version and rules, in the order they are tried."""
    with api_client("policy", url, api_key, "the gateway") as client:
        answer = api_answer("policy", client, ApprovalPolicyVersion, "GET", "/v1/approval-policy")
    if wants_json(output, as_json):
        echo_json(answer)
        return
    changed = f"{answer.changed_by} at {answer.changed_at.isoformat()[:19]}"
    typer.echo(f"version {answer.version} by {changed}: {answer.reason}")
    for n, rule in enumerate(answer.rules, start=1):
        typer.echo(f"{n}. {_rule_line(rule)}")
    typer.echo("otherwise: the chain the requesting service asks for")


@app.command("set")
def set_command(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help='JSON: {"rules": [...]}')],
    reason: Annotated[str, typer.Option("--reason", help="Why (required; kept with the version).")],
    api_key: ApiKeyOption = "",
    output: OutputOption = Format.TABLE,
    as_json: JsonFlag = False,
    url: GatewayUrl = GATEWAY_URL,
) -> None:
    """Make the rules in FILE the next version of the policy."""
    try:
        document = json.loads(file.read_text())
    except ValueError as exc:
        fail("policy", f"{file}: not JSON ({exc})", 2)
    rules = document.get("rules") if isinstance(document, dict) else None
    if not isinstance(rules, list):
        fail("policy", f'{file}: expected {{"rules": [...]}}', 2)
    with api_client("policy", url, api_key, "the gateway") as client:
        body = {"rules": rules, "reason": reason}  # the gate names what its rules cannot take
        answer = api_answer("policy", client, ApprovalPolicyVersion, "PUT", "/v1/approval-policy", json=body)
    if wants_json(output, as_json):
        echo_json(answer)
        return
    typer.echo(f"approval policy version {answer.version} in force ({len(answer.rules)} rules)")


@app.command("history")
def history_command(
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 20,
    api_key: ApiKeyOption = "",
    output: OutputOption = Format.TABLE,
    as_json: JsonFlag = False,
    url: GatewayUrl = GATEWAY_URL,
) -> None:
    """Every version, newest first: who changed the policy, when and why."""
    with api_client("policy", url, api_key, "the gateway") as client:
        path = "/v1/approval-policy/history"
        answer = api_answer("policy", client, ApprovalPolicyHistory, "GET", path, params={"limit": limit})
    if wants_json(output, as_json):
        echo_json(answer)
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
