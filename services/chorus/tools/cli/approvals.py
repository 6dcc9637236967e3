"""``chorus approvals``: a reviewer's queue and decisions, through the gateway's API.

``--url`` (else CHORUS_GATEWAY_URL, else http://127.0.0.1:8080) and your API key
(``--api-key``, else CHORUS_API_KEY): a reviewer's lists and decides for its tier; an
operator's lists every tier.

Exit codes: 0 ok; 1 refused (unknown approval, decided or withdrawn already); 2 bad
input; 69 the gateway is unreachable; 77 the key or its role may not do this (another
tier's approval, or one you submitted).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.markup import escape

from chorus.base.compat import StrEnum
from chorus.contracts.api.gateway import ApprovalQueue, DecisionAccepted, DecisionBody
from chorus.tools.cli.audit import span
from chorus.tools.cli.options import GATEWAY, ApiCall, api_command, table_of


class Decision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    REVISE = "revise"


app = typer.Typer(name="approvals", help="Approvals: list your queue, decide.", no_args_is_help=True)
console = Console(highlight=False)


@api_command(app, "list", GATEWAY)
def list_command(
    call: ApiCall,
    assignee: Annotated[
        str, typer.Option("--assignee", help="me (your tier), all, or a tier (operators).")
    ] = "me",
) -> None:
    """Open approvals, the soonest deadline first: what each is about and how long is left."""
    answer = call.answer(ApprovalQueue, "GET", "/v1/approvals", params={"assignee": assignee})
    if call.printed(answer):
        return
    now = datetime.now(timezone.utc)
    table = table_of("approval", "workflow", "tier", "step", "window left", "summary", wrap={"summary"})
    for a in answer.approvals:
        table.add_row(
            a.approval_id,
            a.workflow_id,
            a.tier,
            str(a.level + 1),
            _left(a.waiting_until, now),
            escape(_summary(a.context)),
        )
    console.print(table)


def _left(until: datetime | None, now: datetime) -> str:
    if not until:
        return "-"
    seconds = (until - now).total_seconds()
    return span(seconds) if seconds > 0 else "due"


def _summary(context: Any) -> str:
    if isinstance(context, dict):
        return str(context.get("summary") or "")
    return str(context or "")


@api_command(app, "decide", GATEWAY)
def decide_command(
    call: ApiCall,
    approval_id: Annotated[str, typer.Argument(help="The approval's id (from `chorus approvals list`).")],
    decision: Annotated[Decision, typer.Argument(help="approve, reject or revise.", case_sensitive=False)],
    comment: Annotated[str, typer.Option("--comment", "-m", help="Why (the audit trail keeps it).")] = "",
) -> None:
    """Decide an approval waiting on your tier. A decision is final: a second one is refused."""
    path = f"/v1/approvals/{quote(approval_id, safe='')}"
    body = DecisionBody.model_construct(decision=decision.value, comment=comment).model_dump(mode="json")
    answer = call.answer(DecisionAccepted, "POST", path, json=body)
    if call.printed(answer):
        return
    typer.echo(f"{answer.approval_id}: {answer.decision} submitted (workflow {answer.workflow_id})")
