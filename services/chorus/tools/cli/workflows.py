"""``chorus workflows``: start, list, show and cancel workflows through the gateway's API.

``--url`` (else CHORUS_GATEWAY_URL, else http://127.0.0.1:8080) and your API key
(``--api-key``, else CHORUS_API_KEY): an operator's or auditor's lists every workflow, a
submitter's its own.

Exit codes: 0 ok; 1 refused (unknown workflow, or it ended otherwise first; an
Idempotency-Key used for another request); 2 bad input; 65 unreadable --data; 66 no
--data file; 69 the gateway is unreachable; 77 the key or its role may not do this.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote

import typer
from pydantic import JsonValue
from rich.console import Console
from rich.markup import escape

from chorus.contracts.api.audit_projector import WorkflowSummary
from chorus.contracts.api.gateway import (
    CancelAccepted,
    CancelBody,
    SearchAttributes,
    SubmissionAccepted,
    WorkflowPage,
    WorkflowState,
)
from chorus.contracts.lifecycle import WORKFLOW_STATUSES
from chorus.tools.cli.audit import at_utc, print_workflow
from chorus.tools.cli.events import CliError, Lane, read_data
from chorus.tools.cli.options import GATEWAY, ApiCall, api_command, fail, table_of

app = typer.Typer(name="workflows", help="Workflows: start, list, show, cancel.", no_args_is_help=True)
console = Console(highlight=False)


def _status_names(incomplete: str) -> list[str]:
    return [s for s in WORKFLOW_STATUSES if s.startswith(incomplete)]


@api_command(app, "start", GATEWAY)
def start_command(
    call: ApiCall,
    workflow_type: Annotated[
        str, typer.Argument(help="A workflow type the gateway starts (workflows.yaml), e.g. procurement.")
    ],
    data: Annotated[
        str,
        typer.Option(
            "--data", "-d", help="Its start event's payload: @file.json, - for stdin, or inline JSON."
        ),
    ],
    priority: Annotated[
        Lane, typer.Option("--priority", case_sensitive=False, help="Priority (its events' lane).")
    ] = Lane.normal,
    subject_ref: Annotated[
        str | None, typer.Option("--subject-ref", help="The data subject it concerns (for erasure).")
    ] = None,
    callback_url: Annotated[
        str | None, typer.Option("--callback-url", help="POSTed the result, signed, when it ends.")
    ] = None,
    deadline_s: Annotated[
        float | None, typer.Option("--deadline-s", help="Seconds until it times out (at most its type's).")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="Asking again with it answers the same workflow."),
    ] = None,
) -> None:
    """Start a workflow as a submission to the gateway (POST /v1/workflows/TYPE): the gateway
    records your key's principal as its submitter and signs the request that starts it, the
    only start its services act on. Prints the new workflow's id."""
    try:
        payload: JsonValue = read_data(data)
    except CliError as exc:
        fail("workflows start", str(exc), exc.code)
    body = {
        "input": payload,
        "priority": priority.value,
        "subject_ref": subject_ref,
        "callback_url": callback_url,
        "deadline_s": deadline_s,
    }
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    path = f"/v1/workflows/{quote(workflow_type, safe='')}"
    sent = {k: v for k, v in body.items() if v is not None}
    answer = call.answer(SubmissionAccepted, "POST", path, json=sent, headers=headers)
    if call.printed(answer):
        return
    typer.echo(f"{answer.workflow_id}: {answer.status} ({answer.status_url})")


@api_command(app, "list", GATEWAY)
def list_command(
    call: ApiCall,
    status: Annotated[
        list[str] | None,
        typer.Option("--status", help="Only these statuses (repeatable).", autocompletion=_status_names),
    ] = None,
    workflow_type: Annotated[str | None, typer.Option("--type", help="Only this workflow type.")] = None,
    stage: Annotated[
        str | None, typer.Option("--stage", help="Only workflows whose latest event is this.")
    ] = None,
    submitted_by: Annotated[str | None, typer.Option("--submitted-by", help="Only this principal's.")] = None,
    since: Annotated[datetime | None, typer.Option("--since", help="Started at or after (ISO 8601).")] = None,
    until: Annotated[datetime | None, typer.Option("--until", help="Started before (ISO 8601).")] = None,
    search: Annotated[
        str | None, typer.Option("--search", "-q", help="A workflow id or business key.")
    ] = None,
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            help="A search over search attributes and status, type, stage: "
            "\"vendor = 'vendor-acme' AND amount > 10000 AND status = 'waiting'\" "
            "(chorus workflows attributes lists them).",
        ),
    ] = None,
    quietest: Annotated[bool, typer.Option("--quietest", help="Longest quiet first (else newest).")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many (pages followed).")] = 50,
) -> None:
    """Workflows matching every filter, newest first, following the API's pages."""
    params: dict[str, Any] = {
        "status": status or None,
        "workflow_type": workflow_type,
        "stage": stage,
        "submitted_by": submitted_by,
        "started_after": _aware(since, "--since"),
        "started_before": _aware(until, "--until"),
        "q": search,
        "query": query,
        "order": "quietest" if quietest else "newest",
    }
    found: list[WorkflowSummary] = []
    cursor: str | None = None
    with call.client() as client:
        while len(found) < limit:
            page_params = {k: v for k, v in params.items() if v is not None}
            page_params["limit"] = min(1000, limit - len(found))
            if cursor:
                page_params["cursor"] = cursor
            page = client.answer(WorkflowPage, "GET", "/v1/workflows", params=page_params)
            found.extend(page.workflows)
            cursor = page.next_cursor
            if not cursor:
                break
    if call.printed({"workflows": [w.model_dump(mode="json") for w in found], "next_cursor": cursor}):
        return
    wrap = {"type", "status", "stage", "waiting for", "business key", "attributes"}
    table = table_of(
        "workflow",
        "type",
        "status",
        "stage",
        "waiting for",
        "started",
        "business key",
        "attributes",
        wrap=wrap,
    )
    for w in found:
        waiting = w.attention.why if w.attention else w.waiting_for or ""
        table.add_row(
            w.workflow_id,
            w.workflow_type,
            w.status,
            w.stage or "",
            escape(waiting),
            at_utc(w.started_at),
            escape(w.business_key or ""),
            escape(" ".join(f"{k}={v}" for k, v in w.attributes.items())),
        )
    console.print(table)
    if cursor:
        console.print(f"[dim]more: raise --limit (shown {len(found)})[/dim]")


@api_command(app, "attributes", GATEWAY)
def attributes_command(call: ApiCall) -> None:
    """What `chorus workflows list --query` searches by: each workflow type's attributes."""
    found = call.answer(SearchAttributes, "GET", "/v1/search-attributes")
    if call.printed(found):
        return
    table = table_of("workflow type", "attribute", "type")
    for name, kind in found.builtin.items():
        table.add_row("(every)", name, kind)
    for workflow_type, attributes in found.workflow_types.items():
        for name, kind in attributes.items():
            table.add_row(workflow_type, name, kind)
    console.print(table)


def _aware(value: datetime | None, option: str) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise typer.BadParameter("give a time zone (e.g. 2026-12-01T09:00:00+00:00)", param_hint=option)
    return value.isoformat()


@api_command(app, "show", GATEWAY)
def show_command(
    call: ApiCall, workflow_id: Annotated[str, typer.Argument(help="The workflow's id.")]
) -> None:
    """Status, stage, what it waits for, and its timeline (events, waits, decisions, traces)."""
    view: WorkflowState = call.answer_as(WorkflowState, "GET", f"/v1/workflows/{quote(workflow_id, safe='')}")
    if call.printed(view):
        return
    print_workflow(workflow_id, view, view.timeline)


@api_command(app, "cancel", GATEWAY)
def cancel_command(
    call: ApiCall,
    workflow_id: Annotated[str, typer.Argument(help="The workflow's id (the submission's answer).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (required; the submitter sees it).")],
) -> None:
    """Stop a running workflow: it ends as cancelled and its compensation runs (a reserved
    budget is released). Asking again is harmless: it answers with the first request."""
    path = f"/v1/workflows/{quote(workflow_id, safe='')}/cancel"
    body = CancelBody.model_construct(reason=reason).model_dump(mode="json")
    answer = call.answer(CancelAccepted, "POST", path, json=body)
    if call.printed(answer):
        return
    typer.echo(
        f"{answer.workflow_id}: {answer.status} (asked by {answer.requested_by} "
        f"at {answer.requested_at.isoformat()[:19]}: {answer.reason})"
    )
