"""``chorus schedules``: start a workflow type on a cron expression or an interval, through
the gateway's API (``--url``, else CHORUS_GATEWAY_URL; your ``--api-key``).

A submitter creates schedules (each run is their submission) and sees its own; operators see
and pause, resume, trigger or delete any; auditors see every one.

Exit codes as ``chorus workflows``'.
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import quote

import typer
from pydantic import JsonValue
from rich.console import Console

from chorus.contracts.api.gateway import Schedule, ScheduleList
from chorus.tools.cli.events import CliError, Lane, read_data
from chorus.tools.cli.options import GATEWAY, ApiCall, api_command, fail, table_of

app = typer.Typer(
    name="schedules", help="Schedules: start workflows on a cron or an interval.", no_args_is_help=True
)
console = Console(highlight=False)
IdArg = Annotated[str, typer.Argument(help="The schedule's id (sch-...).")]


def _when(schedule: Schedule) -> str:
    return f"cron {schedule.cron}" if schedule.cron else f"every {schedule.every_s:g} s"


def _print(schedule: Schedule) -> None:
    nxt = schedule.next_due_at.isoformat()[:19] if schedule.next_due_at else "-"
    typer.echo(
        f"{schedule.schedule_id}: {schedule.workflow_type}, {_when(schedule)}, {schedule.state}, "
        f"overlap {schedule.overlap}, next {nxt}"
    )
    for run in schedule.runs:
        what = run.workflow_id or run.detail or ""
        typer.echo(f"  {run.due_at.isoformat()[:19]} {run.kind:9} {run.status:8} {what}")


@api_command(app, "create", GATEWAY)
def create_command(
    call: ApiCall,
    workflow_type: Annotated[str, typer.Argument(help="The workflow type each run starts.")],
    data: Annotated[
        str, typer.Option("--data", "-d", help="Its input: @file.json, - for stdin, or inline JSON.")
    ],
    cron: Annotated[str | None, typer.Option("--cron", help="Five fields, UTC, e.g. '0 9 * * 1-5'.")] = None,
    every_s: Annotated[float | None, typer.Option("--every-s", help="Or: every so many seconds.")] = None,
    overlap: Annotated[
        str, typer.Option("--overlap", help="A run due while the last still runs: skip, buffer_one or allow.")
    ] = "skip",
    catchup_window_s: Annotated[
        float,
        typer.Option("--catchup-window-s", help="After an outage, start runs due at most this long ago."),
    ] = 3600,
    priority: Annotated[Lane, typer.Option("--priority", case_sensitive=False)] = Lane.normal,
    note: Annotated[str, typer.Option("--note", help="What it is for.")] = "",
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
) -> None:
    """Create a schedule: each run starts WORKFLOW_TYPE with this input as your submission."""
    try:
        payload: JsonValue = read_data(data)
    except CliError as exc:
        fail("schedules create", str(exc), exc.code)
    body = {
        "workflow_type": workflow_type,
        "input": payload,
        "cron": cron,
        "every_s": every_s,
        "overlap": overlap,
        "catchup_window_s": catchup_window_s,
        "priority": priority.value,
        "note": note,
    }
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    sent = {k: v for k, v in body.items() if v is not None}
    answer = call.answer(Schedule, "POST", "/v1/schedules", json=sent, headers=headers)
    if not call.printed(answer):
        _print(answer)


@api_command(app, "list", GATEWAY)
def list_command(call: ApiCall) -> None:
    """The schedules you may see (not deleted), newest first."""
    found = call.answer(ScheduleList, "GET", "/v1/schedules")
    if call.printed(found):
        return
    table = table_of("id", "type", "when", "state", "overlap", "next run", "last run")
    for s in found.schedules:
        last = s.runs[0] if s.runs else None
        table.add_row(
            s.schedule_id,
            s.workflow_type,
            _when(s),
            s.state,
            s.overlap,
            s.next_due_at.isoformat()[:19] if s.next_due_at else "-",
            f"{last.status} {last.workflow_id or ''}".strip() if last else "-",
        )
    console.print(table)


@api_command(app, "show", GATEWAY)
def show_command(call: ApiCall, schedule_id: IdArg) -> None:
    """A schedule and its latest runs."""
    found = call.answer(Schedule, "GET", f"/v1/schedules/{quote(schedule_id, safe='')}")
    if not call.printed(found):
        _print(found)


def _act(call: ApiCall, schedule_id: str, action: Literal["pause", "resume", "trigger"]) -> None:
    found = call.answer(Schedule, "POST", f"/v1/schedules/{quote(schedule_id, safe='')}/{action}")
    if not call.printed(found):
        _print(found)


@api_command(app, "pause", GATEWAY)
def pause_command(call: ApiCall, schedule_id: IdArg) -> None:
    """No run falls due until it is resumed."""
    _act(call, schedule_id, "pause")


@api_command(app, "resume", GATEWAY)
def resume_command(call: ApiCall, schedule_id: IdArg) -> None:
    """Runs fall due again from now (the paused time is not caught up)."""
    _act(call, schedule_id, "resume")


@api_command(app, "trigger", GATEWAY)
def trigger_command(call: ApiCall, schedule_id: IdArg) -> None:
    """One run now (its overlap policy applies)."""
    _act(call, schedule_id, "trigger")


@api_command(app, "delete", GATEWAY)
def delete_command(call: ApiCall, schedule_id: IdArg) -> None:
    """No more runs; those due and not started are skipped."""
    found = call.answer(Schedule, "DELETE", f"/v1/schedules/{quote(schedule_id, safe='')}")
    if not call.printed(found):
        _print(found)
