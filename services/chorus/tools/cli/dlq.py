"""``chorus dlq``: inspect, redrive and discard dead letters.

Every command calls the dead-letter service's HTTP API (``--url``, else
CHORUS_DLQ_URL, else http://127.0.0.1:8102); nothing here touches Kafka or
PostgreSQL. It presents your API key (``--api-key``, else CHORUS_API_KEY); the
service records your key's principal as who redrove or discarded.

Exit codes: 0 ok; 1 refused (unknown id, or a letter already redriven or
discarded: nothing was published); 2 bad input; 69 (EX_UNAVAILABLE) the service
is unreachable, or answers what its API does not publish; 77 (EX_NOPERM) the key is
unknown or its role may not do this.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Annotated, NoReturn

import typer

from chorus.contracts.api.deadletter_service import (
    BulkRedriveBody,
    DiscardBody,
    Done,
    DoneList,
    LetterDetail,
    LetterList,
    Operation,
    RedriveBody,
)
from chorus.tools.cli.options import ApiCall, HttpApi, api_command, fail

API = HttpApi(
    "the dead-letter service", "CHORUS_DLQ_URL", "http://127.0.0.1:8102", "The dead-letter service."
)
_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}

app = typer.Typer(
    name="dlq",
    help="Dead letters: list, show, redrive (after a fix) or discard (with a reason).",
    no_args_is_help=True,
)

Service = Annotated[str | None, typer.Option("--service", help="Failing service.")]
Category = Annotated[
    str | None,
    typer.Option("--category", help="Error category: transient, persistent, semantic, decode, unexpected."),
]
EventType = Annotated[str | None, typer.Option("--event-type", help="Event type of the original record.")]
Since = Annotated[
    str | None,
    typer.Option("--since", help="Dead-lettered at or after: ISO 8601 with offset, or 30m / 2h / 7d ago."),
]
Until = Annotated[
    str | None,
    typer.Option("--until", help="Dead-lettered before: ISO 8601 with offset, or 30m / 2h ago."),
]
Reason = Annotated[str, typer.Option("--reason", help="Why, for the audit trail.")]


@api_command(app, "list", API)
def list_command(
    call: ApiCall,
    *,
    service: Service = None,
    category: Category = None,
    event_type: EventType = None,
    status: Annotated[str | None, typer.Option("--status", help="open, redriven or discarded.")] = None,
    since: Since = None,
    until: Until = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many (1..1000).")] = 100,
) -> None:
    """List dead letters, newest first."""
    params = _filters(service, category, event_type, since, until)
    if status:
        params["status"] = status
    params["limit"] = str(limit)
    body = call.answer(LetterList, "GET", "/v1/dead-letters", params=params)
    if call.printed(body):
        return
    rows: list[tuple[str, ...]] = [
        ("id", "status", "service", "category", "event type", "tries", "dead-lettered", "error")
    ]
    for item in body.items:
        rows.append(
            (
                item.id,
                item.status,
                item.service,
                item.error.category,
                item.original_event_type or "-",
                str(item.attempts),
                _iso(item.dead_lettered_at)[:19],
                _clip(f"{item.error.error_class}: {item.error.message}", 60),
            )
        )
    _table(rows)
    typer.echo(f"{body.count} dead letter(s)" + (" (limit reached)" if body.count == body.limit else ""))


@api_command(app, "show", API)
def show_command(
    call: ApiCall, letter_id: Annotated[str, typer.Argument(help="The dead letter's id.")]
) -> None:
    """Show one dead letter: error, every failure, original record and operations."""
    body = call.answer(LetterDetail, "GET", f"/v1/dead-letters/{letter_id}")
    if call.printed(body):
        return
    original, error = body.original, body.error
    typer.echo(f"dead letter {body.id}  [{body.status}]")
    lines = [
        ("service", f"{body.service} {body.service_version} (group {body.consumer_group})"),
        (
            "event",
            f"{body.original_event_type or '(undecodable)'} {body.original_event_id or ''}"
            f" (workflow {body.original_workflow_id or '-'})",
        ),
        ("error", f"{error.category} {error.error_class}: {error.message}"),
        ("pointer", error.pointer or "-"),
        ("attempts", str(body.attempts)),
        ("dead-lettered", _iso(body.dead_lettered_at)),
        (
            "original",
            f"{original.topic}[{original.partition}]@{original.offset}"
            f"  key={original.key if original.key is not None else original.key_b64}",
        ),
        ("resolved", f"{_iso(body.resolved_at)} by {body.resolved_by}" if body.resolved_at else "-"),
    ]
    width = max(len(name) for name, _ in lines)
    for name, value in lines:
        typer.echo(f"{name.ljust(width)}  {value}")
    typer.echo("headers")
    for header in original.headers:
        shown = header.value if header.value is not None else f"base64:{header.value_b64}"
        typer.echo(f"  {header.key}: {shown}")
    typer.echo("failures")
    for failure in body.failures:
        at = failure.model_dump(mode="json")["at"]
        typer.echo(f"  #{failure.attempt} {at} {failure.error_class}: {failure.message}")
    if original.value_is_json:
        typer.echo("value (JSON)")
        typer.echo(_indent(json.dumps(original.value_json, indent=2, ensure_ascii=False)))
    typer.echo("value (base64)")
    typer.echo(_indent(original.value_b64 or ""))
    if error.traceback:
        typer.echo("traceback")
        typer.echo(_indent(error.traceback.rstrip()))
    typer.echo("operations" if body.operations else "operations  none")
    for op in reversed(body.operations):
        typer.echo(f"  {_operation_line(op)}")


@api_command(app, "redrive", API)
def redrive_command(
    call: ApiCall,
    *,
    letter_id: Annotated[str | None, typer.Argument(help="One letter; omit it to redrive by filter.")] = None,
    reason: Reason = "",
    service: Service = None,
    category: Category = None,
    event_type: EventType = None,
    since: Since = None,
    until: Until = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Bulk: at most this many (default 100).")
    ] = None,
) -> None:
    """Publish a letter's original record again, after the handler was fixed.

    With an id: that letter. Without: every open letter matching the filters
    (at least one of --service, --category, --event-type, --since, --until).
    A letter is redriven at most once; asking again is refused (exit 1).
    """
    filters = _filters(service, category, event_type, since, until)
    if letter_id is not None and (filters or limit is not None):
        _fail("give a letter id or filters, not both", 2)
    answer: Done | DoneList
    with call.client() as client:
        if letter_id is not None:
            body = RedriveBody.model_construct(reason=reason).model_dump(mode="json")
            answer = client.answer(Done, "POST", f"/v1/dead-letters/{letter_id}/redrive", json=body)
            done = [answer]
        else:
            if not filters:
                _fail("name a letter id, or filters for a bulk redrive (see --help)", 2)
            if limit is not None:
                filters["limit"] = str(limit)
            bulk = BulkRedriveBody.model_construct(reason=reason, filter=filters).model_dump(mode="json")
            answer = client.answer(DoneList, "POST", "/v1/dead-letters/redrive", json=bulk)
            done = answer.items
    if call.printed(answer):
        return
    for item in done:
        detail = item.operation.detail
        attempt = f" as attempt {detail['attempt']}" if detail.get("attempt") else " (bytes unchanged)"
        typer.echo(f"redriven {item.letter.id} -> {detail['topic']}{attempt}")
    if letter_id is None:
        typer.echo(f"{len(done)} dead letter(s) redriven")


@api_command(app, "discard", API)
def discard_command(
    call: ApiCall,
    letter_id: Annotated[str, typer.Argument(help="The dead letter's id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is given up (required).")],
) -> None:
    """Give up on a letter: its service stops waiting and the workflow moves on."""
    body = DiscardBody.model_construct(reason=reason).model_dump(mode="json")
    answer = call.answer(Done, "POST", f"/v1/dead-letters/{letter_id}/discard", json=body)
    if call.printed(answer):
        return
    detail = answer.operation.detail
    told = (
        f"; {answer.letter.service} was told to stop waiting"
        if detail.get("published")
        else f" ({detail.get('why', 'nothing published')})"
    )
    typer.echo(f"discarded {answer.letter.id}{told}")


# -- helpers ------------------------------------------------------------------------------------


def _filters(
    service: str | None,
    category: str | None,
    event_type: str | None,
    since: str | None,
    until: str | None,
) -> dict[str, str]:
    given = {
        "service": service,
        "category": category,
        "event_type": event_type,
        "since": _instant("--since", since),
        "until": _instant("--until", until),
    }
    return {name: value for name, value in given.items() if value}


def _instant(option: str, value: str | None, now: datetime | None = None) -> str | None:
    """ISO 8601 passes through (the service validates it); ``2h`` means two hours ago."""
    if not value:
        return None
    match = _RELATIVE.match(value.strip())
    if match is None:
        return value
    seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
    return ((now or datetime.now(timezone.utc)) - timedelta(seconds=seconds)).isoformat()


def _iso(value: datetime | None) -> str:
    """A time as the service wrote it (ISO 8601, its offset kept)."""
    return value.isoformat() if value is not None else "None"


def _fail(message: str, code: int) -> NoReturn:
    fail("dlq", message, code)


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        typer.echo("  ".join([*cells, row[-1]]))


def _operation_line(op: Operation) -> str:
    reason = f" ({op.reason})" if op.reason else ""
    return f"{_iso(op.at)[:19]}  {op.op} by {op.actor}: {op.result}{reason}"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
