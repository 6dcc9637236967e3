"""``chorus replay``, ``chorus timeline`` and ``chorus erase``: the audit projection from
an operator's terminal, through the audit projector's HTTP API (``--api``, or
``CHORUS_AUDIT_URL``); the terminal needs neither PostgreSQL nor Kafka.

Exit codes: 0 ok (replay: projections equal; erase: every service confirmed); 1 replay
found differences or failed, the workflow or erasure is unknown, or the API refused the
request; 2 usage errors; 69 (EX_UNAVAILABLE) the API not reachable at the address tried, or
answering what it does not publish (chorus.contracts.api.audit_projector);
75 (EX_TEMPFAIL) erase: some services have not confirmed yet; 77 (EX_NOPERM) the API key
(``--api-key``, else CHORUS_API_KEY) is unknown or its role may not do this.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, TypeVar, overload
from urllib.parse import quote

import httpx
import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from chorus.base.compat import fromisoformat
from chorus.contracts.api.audit_projector import (
    AccessLog,
    Erasure,
    ErasureRequest,
    ErasureStarted,
    ReplayJob,
    ReplayRequest,
    ReplayResult,
    Spend,
    Timeline,
    TimelineEntry,
    WorkflowStatusView,
)
from chorus.contracts.api.gateway import AcceptedWorkflow
from chorus.tools.cli.options import (
    AUDIT_URL,
    EX_NOPERM,
    ApiKeyOption,
    AuditUrl,
    Format,
    OutputOption,
    api_headers,
    echo_json,
)
from chorus.web.typedclient import UnexpectedAnswerError, answer

EX_UNAVAILABLE = 69
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


class Unavailable(Exception):
    """The audit projector's API could not be reached; the message names the address."""


def _fail(message: str, code: int) -> typer.Exit:
    errors.print(f"chorus: {message}", markup=False)
    return typer.Exit(code)


@contextmanager
def _unavailable_exits() -> Iterator[None]:
    try:
        yield
    except Unavailable as exc:
        raise _fail(str(exc), EX_UNAVAILABLE) from None


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def _parse_since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = fromisoformat(value)
    except ValueError:
        raise _fail(f"--since {value!r} is not an ISO 8601 date-time", 2) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


# -- replay ------------------------------------------------------------------------------------


def replay_command(
    *,
    projection: Annotated[
        str, typer.Option("--projection", help="Which projection to rebuild (only 'audit').")
    ] = "audit",
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Replay from the first record at or after this ISO 8601 time (default: "
            "from the start of the topics). Naive times are UTC.",
        ),
    ] = None,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="Compare with the live projection; exit 1 when they differ."),
    ] = False,
    drop: Annotated[bool, typer.Option("--drop", help="Drop the rebuilt schema when done.")] = False,
    live_timeout_s: Annotated[
        float,
        typer.Option(
            "--live-timeout",
            min=0,
            help="Seconds to wait for the live projector to reach the same offsets before comparing.",
        ),
    ] = 30.0,
    api: AuditUrl = AUDIT_URL,
    api_key: ApiKeyOption = "",
) -> None:
    """Rebuild a projection from the topics and compare it with the live one.

    The audit projector rebuilds into a fresh schema (audit_replay_<id>) with its own
    consumer group, without touching the live projection, and stops at the end offsets
    seen at start. With --verify it is compared row for row with the live projection
    (exit 1 when they differ)."""
    if projection != "audit":
        raise _fail(f"unknown projection {projection!r}; known: audit", 2)
    since_at = _parse_since(since)
    body = ReplayRequest(since=since_at, verify=verify, drop=drop, live_timeout_s=live_timeout_s)
    headers = api_headers(api_key)

    async def run() -> ReplayJob:
        async with httpx.AsyncClient(base_url=api.rstrip("/"), timeout=30, headers=headers) as client:
            job = await _api(client, ReplayJob, "POST", "/v1/replays", json=body.model_dump(mode="json"))
            with Progress(
                TextColumn("[bold]replaying[/bold] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=False,
            ) as bar:
                task = bar.add_task("topics", total=None)
                while job.state == "running":
                    await asyncio.sleep(0.2)
                    job = await _api(client, ReplayJob, "GET", f"/v1/replays/{job.replay_id}")
                    bar.update(task, completed=job.progress.done, total=job.progress.total)
            return job

    with _unavailable_exits():
        job = _run(run())
    if job.state != "succeeded" or job.result is None:
        raise _fail(f"replay {job.replay_id} failed: {job.error}", 1)
    raise typer.Exit(_print_replay(job, job.result, dropped=drop))


def _print_replay(job: ReplayJob, result: ReplayResult, *, dropped: bool) -> int:
    """What a finished replay did, and the comparison; 1 when the projections differ."""
    rate = result.records / result.seconds if result.seconds else 0.0
    console.print(
        f"replayed {result.records} record(s) ({result.applied} projected) from "
        f"{len(result.topics)} topic(s) into schema [bold]{job.schema_name}[/bold] "
        f"(group {result.group}) in {result.seconds:.2f}s ({rate:.0f} records/s)"
        + (f"; {result.undecodable} undecodable record(s) skipped" if result.undecodable else "")
    )
    code = 0
    comparison = job.comparison
    if comparison is not None:
        if comparison.live_lag:
            errors.print(
                f"warning: the live projector is still {comparison.live_lag} record(s) behind "
                "the replayed offsets; differences may only be lag"
            )
        console.print(f"live:   md5 {comparison.live_checksum}")
        console.print(f"replay: md5 {comparison.replay_checksum}")
        if comparison.equal:
            console.print(f"[green]equal[/green]: {comparison.workflows} workflow(s)")
        else:
            console.print(
                f"[red]different[/red]: {comparison.differing_count} of "
                f"{comparison.workflows} workflow(s) differ; first:"
            )
            for workflow_id in comparison.differing[:10]:
                console.print(f"  {workflow_id}", markup=False)
            code = 1
    if dropped:
        console.print(f"dropped schema {job.schema_name}")
    return code


# -- timeline ----------------------------------------------------------------------------------


def timeline_command(
    workflow_id: Annotated[str, typer.Argument(help="The workflow id.")],
    api: AuditUrl = AUDIT_URL,
    api_key: ApiKeyOption = "",
    output: OutputOption = Format.TABLE,
) -> None:
    """A workflow's events, stages, waits and decisions, from the audit projection."""
    headers = api_headers(api_key)

    async def read() -> tuple[WorkflowStatusView | None, list[TimelineEntry]]:
        async with httpx.AsyncClient(base_url=api.rstrip("/"), timeout=30, headers=headers) as client:
            quoted = quote(workflow_id, safe="")
            status = await _api(client, WorkflowStatusView, "GET", f"/v1/workflows/{quoted}", missing_ok=True)
            timeline = await _api(client, Timeline, "GET", f"/v1/workflows/{quoted}/timeline")
            return status, timeline.timeline

    with _unavailable_exits():
        status, entries = _run(read())
    if status is None and not entries:
        raise _fail(f"unknown workflow {workflow_id!r} (not in the audit projection at {api})", 1)
    if output is Format.JSON:
        shown = status.model_dump(mode="json") if status else {"workflow_id": workflow_id}
        echo_json({**shown, "timeline": [e.model_dump(mode="json") for e in entries]})
        return
    print_workflow(workflow_id, status, entries)


def spend_line(spend: Spend) -> str:
    """What a workflow's models used, in one line (the console's workflow page says the same)."""
    return (
        f"${spend.cost_usd:.6f}  {spend.input_tokens + spend.output_tokens} tokens "
        f"({spend.input_tokens} in, {spend.output_tokens} out)  {spend.model_turns} model turns  "
        f"{spend.tool_calls} tool calls  {', '.join(spend.models)}"
    )


def print_workflow(
    workflow_id: str, status: WorkflowStatusView | AcceptedWorkflow | None, entries: list[TimelineEntry]
) -> None:
    """A workflow's status line and its timeline as a table (``chorus timeline``,
    ``chorus workflows show``)."""
    if isinstance(status, AcceptedWorkflow):  # only the gateway knows it yet
        console.print(
            f"[bold]{escape(workflow_id)}[/bold]  {escape(status.workflow_type)}  status "
            f"[bold]{status.status}[/bold]  stage -"
        )
        console.print(f"started {at_utc(status.accepted_at)}  events 0  attempts 0")
    elif status is not None:
        console.print(
            f"[bold]{escape(workflow_id)}[/bold]  {escape(status.workflow_type)}  status "
            f"[bold]{status.status}[/bold]  stage {status.stage or '-'}"
        )
        waiting = (
            f"  waiting for {escape(status.waiting_for)}"
            + (f" until {at_utc(status.waiting_until)}" if status.waiting_until else "")
            if status.waiting_for
            else ""
        )
        ended = (
            f"  ended {at_utc(status.ended_at)} (took {span(status.duration_s or 0.0)})"
            if status.ended_at
            else ""
        )
        counts = f"events {status.events}  attempts {status.attempts}"
        console.print(f"started {at_utc(status.started_at)}{ended}{waiting}  {counts}")
        if status.spend is not None:
            console.print(f"spend {spend_line(status.spend)}")
    else:
        console.print(f"[bold]{escape(workflow_id)}[/bold]: no status row (removed by the janitor)")
    table = Table(show_lines=False)
    for column in ("occurred at", "event", "from", "decision / actor", "wait / call", "trace"):
        table.add_column(column)
    for e in entries:
        # The release that took the step (versioned rollouts), where the audit log has it.
        producer = f"{e.producer} {e.producer_version}" if e.producer_version else e.producer
        table.add_row(
            at_utc(e.occurred_at),
            e.event_type if e.origin == "topic" else f"{e.event_type} [dim]({e.origin})[/dim]",
            escape(producer),
            escape(" / ".join(filter(None, [e.decision, e.actor]))),
            escape(_wait_or_call(e.event_type, e.payload, e.external_call)),
            (e.trace_id or "")[:8],
        )
    console.print(table)


def at_utc(value: datetime | None) -> str:
    """A time from an API, in UTC, to the second."""
    if value is None:
        return "-"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def span(seconds: float) -> str:
    """8h, 1d 2h, 90s: a window as a person reads it."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s"))]
    return " ".join(p for p in parts if not p.startswith("0")) or "0s"


def _wait_or_call(event_type: str, payload: dict[str, Any], external_call: str | None) -> str:
    if external_call:
        return external_call
    if event_type == "approval.requested" and isinstance(payload.get("chain"), list):
        first = payload["chain"][0] if payload["chain"] else {}
        window = first.get("window_s")
        length = span(float(window)) if isinstance(window, int | float) else "?"
        return f"waits: approval by {first.get('tier')} (window {length})"
    if event_type == "approval.escalated":
        return f"waits: approval by {payload.get('to_tier')} until {payload.get('waiting_until')}"
    if event_type == "review.requested":
        return "waits: human review"
    if event_type == "event.dead_lettered":
        error = payload.get("error") or {}
        return f"dead letter: {error.get('error_class', '?')}"
    if event_type == "workflow.ended":
        return f"outcome: {payload.get('outcome', '?')}"
    return ""


# -- erase -------------------------------------------------------------------------------------

EX_TEMPFAIL = 75


def erase_command(
    subject: Annotated[
        str | None, typer.Option("--subject", help="The subject reference to erase (subject_ref).")
    ] = None,
    erasure_id: Annotated[
        str | None,
        typer.Option("--id", help="Show (and wait for) an erasure asked for earlier, by its id."),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    wait_s: Annotated[
        float,
        typer.Option("--wait", min=0, help="Seconds to wait for every service to confirm."),
    ] = 30.0,
    api: AuditUrl = AUDIT_URL,
    api_key: ApiKeyOption = "",
) -> None:
    """Erase a data subject's data everywhere Chorus keeps it, and show who confirmed.

    The audit projector redacts its projections and records the erasure (a hash of the
    reference, counts, actor, time); every service then removes the subject's workflow
    state from its own tables and confirms. Exit 0 when every service confirmed, 75
    (EX_TEMPFAIL) when some had not within --wait (they will when they run: check
    again with --id)."""
    if (subject is None) == (erasure_id is None):
        raise _fail("give either --subject (a new erasure) or --id (an earlier one)", 2)
    if subject is not None and not yes:
        typer.confirm(f"Erase every trace of {subject!r}? This cannot be undone", abort=True)
    base = api.rstrip("/")
    headers = api_headers(api_key)

    async def run() -> Erasure | ErasureStarted:
        async with httpx.AsyncClient(base_url=base, timeout=30, headers=headers) as client:
            found: Erasure | ErasureStarted
            if subject is not None:
                body = ErasureRequest.model_construct(subject_ref=subject).model_dump(mode="json")
                found = await _api(client, ErasureStarted, "POST", "/v1/erasures", json=body)
                console.print(
                    f"erasure {found.erasure_id} recorded ({found.subject_hash}); "
                    f"{found.workflows} workflow(s) in the audit projection"
                )
            else:
                found = await _api(client, Erasure, "GET", f"/v1/erasures/{quote(erasure_id or '', safe='')}")
            deadline = asyncio.get_running_loop().time() + wait_s
            while not found.complete and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.5)
                found = await _api(client, Erasure, "GET", f"/v1/erasures/{found.erasure_id}")
            return found

    with _unavailable_exits():
        found = _run(run())
    table = Table(show_lines=False)
    for column in ("service", "confirmed at", "workflows", "rows removed"):
        table.add_column(column)
    table.add_row("audit projection", found.erased_at.isoformat(), "", _rows(found.rows))
    for service, c in found.confirmations.items():
        table.add_row(escape(service), c.confirmed_at.isoformat(), str(c.workflows), _rows(c.rows))
    for service in found.pending:
        table.add_row(escape(service), "[yellow]not yet[/yellow]", "", "")
    console.print(table)
    if not found.complete:
        raise _fail(
            f"{len(found.pending)} service(s) have not confirmed yet: {', '.join(found.pending)}; "
            f"check again with: chorus erase --id {found.erasure_id}",
            EX_TEMPFAIL,
        )


def _rows(rows: dict[str, int]) -> str:
    return ", ".join(f"{table} {n}" for table, n in rows.items()) or "-"


@overload
async def _api(
    client: httpx.AsyncClient,
    model: type[M],
    method: str,
    path: str,
    *,
    missing_ok: Literal[True],
    **kwargs: Any,
) -> M | None: ...


@overload
async def _api(client: httpx.AsyncClient, model: type[M], method: str, path: str, **kwargs: Any) -> M: ...


async def _api(
    client: httpx.AsyncClient,
    model: type[M],
    method: str,
    path: str,
    *,
    missing_ok: bool = False,
    **kwargs: Any,
) -> M | None:
    """One call to the audit projector's API: its answer as the model it publishes (None
    for a 404 when ``missing_ok``), a problem's detail as the command's error (exit 1), or
    Unavailable naming the address (or what in the answer is not what it publishes)."""
    try:
        response = await client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise Unavailable(
            f"cannot reach the audit projector at {client.base_url}: {exc or type(exc).__name__}. "
            "Is it running? Try `make services`."
        ) from None
    if response.status_code == 404 and missing_ok:
        return None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        code = EX_NOPERM if response.status_code in (401, 403) else 1
        raise _fail(f"{method} {path}: {response.status_code} {detail}", code)
    try:
        return answer(model, response)
    except UnexpectedAnswerError as exc:
        raise Unavailable(f"{exc} (is it the audit projector?)") from None


# -- access log ---------------------------------------------------------------------------------

audit_app = typer.Typer(help="Who read personal data (the access log).", no_args_is_help=True)


@audit_app.command("access")
def access_command(
    subject: Annotated[str, typer.Option("--subject", help="The subject reference (subject_ref).")],
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Most recent reads to show.")] = 100,
    api: AuditUrl = AUDIT_URL,
    api_key: ApiKeyOption = "",
    output: OutputOption = Format.TABLE,
) -> None:
    """Every read of the subject's personal data through the APIs and this CLI, newest first:
    when, who (and for whom, when a service read on a person's behalf), which workflow and
    fields, through which route. For operators and auditors."""
    headers = api_headers(api_key)

    async def read() -> AccessLog:
        async with httpx.AsyncClient(base_url=api.rstrip("/"), timeout=30, headers=headers) as client:
            params = {"subject_ref": subject, "limit": str(limit)}
            return await _api(client, AccessLog, "GET", "/v1/access", params=params)

    with _unavailable_exits():
        found = _run(read())
    if output is Format.JSON:
        echo_json(found)
        return
    console.print(f"{len(found.accesses)} read(s) of {found.subject_hash}'s personal data")
    table = Table(show_lines=False)
    for column in ("at", "principal", "for", "workflow", "fields", "route"):
        table.add_column(column)
    for a in found.accesses:
        table.add_row(
            at_utc(a.at),
            escape(a.principal),
            escape(a.on_behalf_of or "-"),
            escape(a.workflow_id),
            escape(", ".join(a.fields)),
            escape(a.route),
        )
    console.print(table)
