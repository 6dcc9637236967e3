"""``chorus workflows bulk-*``: an operator's action on every running workflow a query finds,
through the gateway's bulk actions (POST /v1/bulk-actions): cancel, reset to an event type,
redrive the dead letters each waits on, move each to another release of a service (a
signal: ``bulk-signal``). ``--dry-run`` counts first; the gateway acts on each workflow once,
at ``--rate``, and carries on after a restart; ``bulk-status`` shows how far it got."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer

from chorus.contracts.api.gateway import BulkAction
from chorus.tools.cli.audit import at_utc
from chorus.tools.cli.options import GATEWAY, ApiCall, api_command
from chorus.tools.cli.workflows import app

QueryOpt = Annotated[
    str,
    typer.Option("--query", help="Which workflows (as `chorus workflows list --query`); running ones only."),
]
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why (required; in each workflow's audit trail).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Count what it would act on; do nothing.")]
RateOpt = Annotated[float, typer.Option("--rate", min=0.01, max=100, help="At most this many a second.")]
KeyOpt = Annotated[
    str | None, typer.Option("--idempotency-key", help="Asking again with it is the same action.")
]


def ask(call: ApiCall, body: dict[str, Any], idempotency_key: str | None, would: str, doing: str) -> None:
    """POST the bulk action and say what it does (``would``: "cancel", ``doing``: "cancelling")."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    answer = call.answer(BulkAction, "POST", "/v1/bulk-actions", json=body, headers=headers)
    if call.printed(answer):
        return
    if answer.bulk_id is None:
        typer.echo(f"dry run: would {would} {answer.matched} workflow(s); nothing done")
        for item in answer.items:
            typer.echo(f"  {item.workflow_id}")
        return
    typer.echo(f"{answer.bulk_id}: {doing} {answer.matched} workflow(s) at {answer.rate_per_s:g}/s")


def _body(action: str, query: str, reason: str, dry_run: bool, rate: float, **targets: str) -> dict[str, Any]:
    return {
        "action": action,
        **targets,
        "query": query,
        "reason": reason,
        "dry_run": dry_run,
        "rate_per_s": rate,
    }


@api_command(app, "bulk-cancel", GATEWAY)
def bulk_cancel_command(
    call: ApiCall,
    query: QueryOpt,
    reason: ReasonOpt,
    dry_run: DryRunOpt = False,
    rate: RateOpt = 10.0,
    idempotency_key: KeyOpt = None,
) -> None:
    """Cancel every running workflow a query finds (operators)."""
    ask(call, _body("cancel", query, reason, dry_run, rate), idempotency_key, "cancel", "cancelling")


@api_command(app, "bulk-reset", GATEWAY)
def bulk_reset_command(
    call: ApiCall,
    query: QueryOpt,
    to: Annotated[str, typer.Option("--to", help="The event type each goes back to (its latest one).")],
    reason: ReasonOpt,
    dry_run: DryRunOpt = False,
    rate: RateOpt = 10.0,
    idempotency_key: KeyOpt = None,
) -> None:
    """Reset every waiting workflow a query finds to its latest event of a type (operators),
    as `chorus workflows reset` would; one that cannot be reset there is skipped, saying why."""
    body = _body("reset", query, reason, dry_run, rate, reset_to=to)
    ask(call, body, idempotency_key, f"reset to {to}", f"resetting to {to}")


@api_command(app, "bulk-redrive", GATEWAY)
def bulk_redrive_command(
    call: ApiCall,
    query: QueryOpt,
    reason: ReasonOpt,
    dry_run: DryRunOpt = False,
    rate: RateOpt = 10.0,
    idempotency_key: KeyOpt = None,
) -> None:
    """Redrive the dead letters each workflow a query finds waits on (operators): the
    dead-letter service redrives them, naming you as the operation's actor."""
    ask(
        call,
        _body("redrive", query, reason, dry_run, rate),
        idempotency_key,
        "redrive the dead letters of",
        "redriving the dead letters of",
    )


@api_command(app, "bulk-repin", GATEWAY)
def bulk_repin_command(
    call: ApiCall,
    query: QueryOpt,
    service: Annotated[str, typer.Option("--service", help="The service whose release each moves to.")],
    to: Annotated[str, typer.Option("--to", help="The release of --service each moves to.")],
    reason: ReasonOpt,
    dry_run: DryRunOpt = False,
    rate: RateOpt = 10.0,
    idempotency_key: KeyOpt = None,
) -> None:
    """Move every running workflow a query finds to another release of a service
    (operators): the rollout service checks each and asks its releases; `chorus rollout
    status SERVICE` shows each move's answer."""
    body = _body("repin", query, reason, dry_run, rate, service=service, to_release=to)
    ask(call, body, idempotency_key, f"move to {service} {to}", f"moving to {service} {to}")


@api_command(app, "bulk-status", GATEWAY)
def bulk_status_command(
    call: ApiCall,
    bulk_id: Annotated[str, typer.Argument(help="The bulk action's id (a bulk-* command's answer).")],
) -> None:
    """How far a bulk action got: done, skipped (and why), pending."""
    answer = call.answer(BulkAction, "GET", f"/v1/bulk-actions/{quote(bulk_id, safe='')}")
    if call.printed(answer):
        return
    state = f"finished {at_utc(answer.finished_at)}" if answer.finished_at else "running"
    typer.echo(
        f"{answer.bulk_id}: {answer.action} by {answer.requested_by}, {state}: {answer.done} done, "
        f"{answer.skipped} skipped, {answer.pending} pending of {answer.matched}"
    )
    for item in answer.items:
        if item.status == "skipped":
            typer.echo(f"  {item.workflow_id}: skipped ({item.detail})")
