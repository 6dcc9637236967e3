"""``chorus workflows signal|update|signals|signal-status``: a person's input to a running
workflow, through the gateway (``workflows.yaml``'s ``signals``).

A signal is sent and answered 202 at once; an update waits for the workflow's answer (up to
the signal's timeout) and prints it. Exit codes as ``chorus workflows``'; an update the
workflow refused exits 1, one not answered in time 75 (it stands: ``signal-status`` later).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import typer
from pydantic import JsonValue

from chorus.contracts.api.gateway import SignalSent, WorkflowSignals
from chorus.tools.cli.bulk import ask
from chorus.tools.cli.events import CliError, read_data
from chorus.tools.cli.options import GATEWAY, ApiCall, api_command, fail, table_of
from chorus.tools.cli.workflows import app, console

EX_TEMPFAIL = 75
UPDATE_WAIT_S = 70.0

WorkflowArg = Annotated[str, typer.Argument(help="The workflow's id (the submission's answer).")]
NameArg = Annotated[str, typer.Argument(help="The signal's name (`chorus workflows signals ID` lists them).")]
InputOpt = Annotated[
    str, typer.Option("--input", "-i", help="Its input: @file.json, - for stdin, or inline JSON.")
]
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why (required; in the workflow's audit trail).")]
KeyOpt = Annotated[str | None, typer.Option("--idempotency-key", help="Sending again with it sends it once.")]


def _send(
    call: ApiCall, kind: str, workflow_id: str, name: str, data: str, reason: str, key: str | None
) -> SignalSent:
    try:
        payload: JsonValue = read_data(data)
    except CliError as exc:
        fail(f"workflows {kind}", str(exc), exc.code)
    path = f"/v1/workflows/{quote(workflow_id, safe='')}/{kind}s/{quote(name, safe='')}"
    headers = {"Idempotency-Key": key} if key else {}
    # An update waits up to its timeout (at most 60 s, workflows.yaml) before it answers.
    body = {"input": payload, "reason": reason}
    return call.answer(SignalSent, "POST", path, json=body, headers=headers, timeout=UPDATE_WAIT_S)


def _describe(sent: SignalSent) -> str:
    head = f"{sent.signal_id}: {sent.name} to {sent.workflow_id}"
    if sent.answer is None:
        return f"{head}: sent at {sent.sent_at.isoformat()[:19]}, not answered yet"
    verdict = "accepted" if sent.answer.accepted else "refused"
    return f"{head}: {verdict}: {sent.answer.detail}"


@api_command(app, "signal", GATEWAY)
def signal_command(
    call: ApiCall,
    workflow_id: WorkflowArg,
    name: NameArg,
    data: InputOpt,
    reason: ReasonOpt,
    idempotency_key: KeyOpt = None,
) -> None:
    """Send a running workflow a signal (as its type declares, by your key's role). It is
    ordered with everything else that happens to the workflow; `signal-status` shows the
    workflow's answer."""
    sent = _send(call, "signal", workflow_id, name, data, reason, idempotency_key)
    if not call.printed(sent):
        typer.echo(_describe(sent))


@api_command(app, "update", GATEWAY)
def update_command(
    call: ApiCall,
    workflow_id: WorkflowArg,
    name: NameArg,
    data: InputOpt,
    reason: ReasonOpt,
    idempotency_key: KeyOpt = None,
) -> None:
    """Send a signal and wait for the workflow's answer (a signal its type declares an answer
    for): prints whether it took it and what it did."""
    sent = _send(call, "update", workflow_id, name, data, reason, idempotency_key)
    if not call.printed(sent):
        typer.echo(_describe(sent))
    if sent.answer is None:
        raise typer.Exit(EX_TEMPFAIL)
    if not sent.answer.accepted:
        raise typer.Exit(1)


@api_command(app, "signals", GATEWAY)
def signals_command(call: ApiCall, workflow_id: WorkflowArg) -> None:
    """What you may send this workflow now, each with its input's fields."""
    found = call.answer(WorkflowSignals, "GET", f"/v1/workflows/{quote(workflow_id, safe='')}/signals")
    if call.printed(found):
        return
    if not found.signals:
        typer.echo(f"{workflow_id} ({found.workflow_type}): nothing you may send it now")
        return
    table = table_of("name", "kind", "input", "description")
    for offered in found.signals:
        fields = ", ".join(offered.input_schema.get("properties", {}))
        kind = f"update ({offered.timeout_s:g} s)" if offered.update else "signal"
        table.add_row(
            offered.name, kind, fields, offered.description.splitlines()[0] if offered.description else ""
        )
    console.print(table)


@api_command(app, "signal-status", GATEWAY)
def signal_status_command(
    call: ApiCall, signal_id: Annotated[str, typer.Argument(help="The id a signal or update answered with.")]
) -> None:
    """A signal or update you sent: whether the workflow answered, and what."""
    sent = call.answer(SignalSent, "GET", f"/v1/signals/{quote(signal_id, safe='')}")
    if not call.printed(sent):
        typer.echo(_describe(sent))


@api_command(app, "bulk-signal", GATEWAY)
def bulk_signal_command(
    call: ApiCall,
    query: Annotated[
        str, typer.Option("--query", help="Which workflows (as `chorus workflows list --query`).")
    ],
    name: Annotated[str, typer.Option("--signal", help="A signal operators may send.")],
    data: InputOpt,
    reason: ReasonOpt,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what it would signal; send nothing.")
    ] = False,
    rate: Annotated[
        float, typer.Option("--rate", min=0.01, max=100, help="At most this many a second.")
    ] = 10.0,
    idempotency_key: KeyOpt = None,
) -> None:
    """Send a signal to every running workflow a query finds (operators): each once, at
    --rate, carried on after a restart. `bulk-status` shows how far it got."""
    try:
        payload: JsonValue = read_data(data)
    except CliError as exc:
        fail("workflows bulk-signal", str(exc), exc.code)
    body = {
        "action": "signal",
        "signal": name,
        "input": payload,
        "query": query,
        "reason": reason,
        "dry_run": dry_run,
        "rate_per_s": rate,
    }
    ask(call, body, idempotency_key, f"send {name} to", f"sending {name} to")
