"""``chorus workflows reset ID --to EVENT_ID --reason ...``: take a waiting workflow back to
one of its events (an operator's repair, through the gateway). Every service rolls back to
what it was before handling the event, gives back what the steps after it took where the
workflow declares how, and handles the event again; the timeline shows what each did.
Refused (exit 1, saying why) while the workflow runs, once it ended, or past an event
nothing gives back."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import typer

from chorus.contracts.api.gateway import ResetAccepted
from chorus.tools.cli.options import GATEWAY, ApiCall, api_command
from chorus.tools.cli.workflows import app


@api_command(app, "reset", GATEWAY)
def reset_command(
    call: ApiCall,
    workflow_id: Annotated[str, typer.Argument(help="The workflow's id.")],
    to: Annotated[str, typer.Option("--to", help="The event to go back to (an event id from its timeline).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (required; in the workflow's audit trail).")],
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Asking again with it resets once.")
    ] = None,
) -> None:
    """Reset a waiting workflow to one of its events (operators): the steps after it are
    undone and run again."""
    path = f"/v1/workflows/{quote(workflow_id, safe='')}/reset"
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    accepted = call.answer(
        ResetAccepted, "POST", path, json={"event_id": to, "reason": reason}, headers=headers
    )
    if call.printed(accepted):
        return
    undone = ", ".join(accepted.undone) or "nothing"
    given_back = f"; given back: {', '.join(accepted.compensated)}" if accepted.compensated else ""
    typer.echo(
        f"{accepted.reset_id}: {workflow_id} goes back to {accepted.point_event_type} "
        f"({accepted.point_event_id}); undone: {undone}{given_back}"
    )
