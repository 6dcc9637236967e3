"""``chorus status``: every service's ``/health`` in one table: consumer lag, outbox
backlog, breakers, stuck records named; with an API key (operator or auditor), each
service's open dead letters too, from the dead-letter service.

Asks each service on its documented port (``make services`` runs them there; see
README.md). Exit codes: 0 every service ok; 1 a service is degraded (records stuck
behind an infrastructure failure), failing or unreachable; 69 (EX_UNAVAILABLE) none
answered.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console

from chorus.contracts.api.deadletter_service import GroupList
from chorus.tools.cli.options import Format, JsonFlag, OutputOption, echo_json, table_of, wants_json
from chorus.tools.devstack import DOCUMENTED_PORTS
from chorus.web.typedclient import UnexpectedAnswerError, answer

EX_UNAVAILABLE = 69


async def _health(client: httpx.AsyncClient, name: str, url: str) -> dict[str, Any]:
    try:
        response = await client.get(url)
        body: dict[str, Any] = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {
            "service": name,
            "status": "unreachable",
            "error": f"no answer at {url} ({type(exc).__name__})",
        }
    return {"service": name, **body}


async def gather_health(targets: dict[str, str], timeout_s: float) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        return list(
            await asyncio.gather(
                *(_health(client, name, f"{base.rstrip('/')}/health") for name, base in targets.items())
            )
        )


async def dead_letter_depth(base_url: str, api_key: str, timeout_s: float) -> dict[str, int] | str:
    """Open dead letters per service (the dead-letter service's groups), or why not known."""
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(timeout=timeout_s, headers=headers) as client:
        try:
            response = await client.get(
                f"{base_url.rstrip('/')}/v1/dead-letters/groups", params={"status": "open"}
            )
        except httpx.HTTPError as exc:
            return f"dead-letter service unreachable at {base_url} ({type(exc).__name__})"
    if response.status_code != 200:
        return f"dead-letter service answered {response.status_code}"
    try:
        groups = answer(GroupList, response).groups
    except UnexpectedAnswerError as exc:
        return str(exc)
    depth: dict[str, int] = {}
    for group in groups:
        if group.status == "open":
            depth[group.service] = depth.get(group.service, 0) + group.count
    return depth


def status_command(
    host: Annotated[str, typer.Option("--host", help="Where the services run.")] = "127.0.0.1",
    urls: Annotated[
        list[str] | None,
        typer.Option(
            "--url",
            help="NAME=BASE_URL of a service to ask instead of the documented ports (repeatable).",
        ),
    ] = None,
    output: OutputOption = Format.TABLE,
    as_json: JsonFlag = False,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds per service.")] = 3.0,
    api_key: Annotated[
        str,
        typer.Option(
            "--api-key",
            envvar="CHORUS_API_KEY",
            show_default=False,
            help="An operator's or auditor's key: adds each service's open dead letters.",
        ),
    ] = "",
) -> None:
    """Health of every service: partitions, consumer lag, outbox backlog, in flight, relay,
    breakers, open dead letters, and records stuck behind an outage."""
    targets = {name: f"http://{host}:{port}" for name, port in DOCUMENTED_PORTS.items()}
    if urls:
        targets = {}
        for item in urls:
            name, sep, base = item.partition("=")
            if not sep or not name or not base.startswith(("http://", "https://")):
                raise typer.BadParameter(f"{item!r}: expected NAME=http://host:port", param_hint="--url")
            targets[name] = base
    reports = asyncio.run(gather_health(targets, timeout_s))
    unknown_depth = None
    if api_key and "deadletter_service" in targets:
        depth = asyncio.run(dead_letter_depth(targets["deadletter_service"], api_key, timeout_s))
        if isinstance(depth, str):
            unknown_depth = depth
        for r in reports:
            r["dead_letters_open"] = depth.get(r["service"], 0) if isinstance(depth, dict) else None
    if wants_json(output, as_json):
        echo_json(reports)
    else:
        _print(reports)
        if unknown_depth:
            typer.echo(f"open dead letters unknown: {unknown_depth}", err=True)
    statuses = {r["status"] for r in reports}
    if statuses == {"unreachable"}:
        raise typer.Exit(EX_UNAVAILABLE)
    if statuses != {"ok"}:
        raise typer.Exit(1)


def _print(reports: list[dict[str, Any]]) -> None:
    console = Console()
    columns = ("service", "status", "partitions", "lag", "outbox", "in flight", "dead letters", "relay")
    table = table_of(*columns, "stuck", "breakers")

    colours = {"ok": "green", "degraded": "yellow"}
    for r in reports:
        stuck = r.get("stuck_records") or []
        table.add_row(
            r["service"],
            f"[{colours.get(r['status'], 'red')}]{r['status']}[/]",
            str(r.get("assigned_partitions", "")),
            _count(r.get("consumer_lag")),
            _count(r.get("outbox_backlog")),
            str(r.get("in_flight", "")),
            _count(r.get("dead_letters_open")),
            "leader" if r.get("relay_leader") else "",
            str(len(stuck)) if stuck else "",
            _breakers(r.get("breakers") or {}),
        )
    console.print(table)
    for r in reports:
        if r.get("error"):
            console.print(f"[red]{r['service']}: {r['error']}[/]", soft_wrap=True)
        for name, state in (r.get("breakers") or {}).items():
            if state != "closed":
                console.print(
                    f"[yellow]{r['service']}: circuit breaker {name} is {state}: calls fail fast[/]"
                )
        for s in r.get("stuck_records") or []:
            console.print(
                f"[yellow]{r['service']}: stuck since {s['failing_since']} after {s['attempts']} attempts: "
                f"{s['topic']}[{s['partition']}]@{s['offset']} ({s['error']})[/]"
            )


def _count(value: Any) -> str:
    """A number, yellow when not zero; blank when not known."""
    if value is None:
        return ""
    return f"[yellow]{value}[/]" if value else "0"


def _breakers(states: dict[str, str]) -> str:
    """The breakers that are not closed, by name; else how many are (all closed)."""
    tripped = [f"{name} {state}" for name, state in states.items() if state != "closed"]
    if tripped:
        return f"[yellow]{', '.join(tripped)}[/]"
    return f"{len(states)} closed" if states else ""
