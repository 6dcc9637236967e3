"""The operator API (FastAPI; OpenAPI at /openapi.json), beside ``/health`` and ``/metrics``.

GET  /v1/dead-letters                 list, newest first; filters: service, category,
                                      event_type, status, since, until (ISO 8601 with
                                      offset, on dead_lettered_at), limit (1..1000)
GET  /v1/dead-letters/groups          counts by service, category and status (same filters)
GET  /v1/dead-letters/{id}            one letter: original bytes (base64, and decoded
                                      when JSON), error, every failure, its operations
POST /v1/dead-letters/{id}/redrive    {"reason"?}  publish the original again
POST /v1/dead-letters/{id}/discard    {"reason"}   give up; release the workflow
POST /v1/dead-letters/redrive         {"reason"?, "filter": {...}}  bulk redrive
GET  /v1/operations                   audit trail; filters: letter_id, op, actor, limit

Every route takes an API key (:mod:`chorus.web.apikeys`). Reads are for operators and
auditors (a letter holds the original payload and a traceback); redrive and discard
for operators only, and the operation's actor is the key's principal. Bodies are
JSON only (a form or text/plain POST is a 415).

Errors are RFC 9457 problem+json: 400 names the bad query ``parameter``, 422 the
failing body field, 404 an unknown id, 409 a letter that was already redriven or
discarded (nothing is published).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from chorus.kernel.service import RuntimeHandle
from chorus.web.apikeys import ApiKey, role
from chorus.web.webapi import Problem, api_router, problems
from chorus_contracts.base import Comment
from deadletter_service import operations
from deadletter_service.adapters import repository as repo
from deadletter_service.adapters.repository import Group, Letter, OperationRow
from deadletter_service.domain import (
    LIST_PARAMETERS,
    MAX_LIMIT,
    OPEN,
    FilterError,
    LetterFilter,
    parse_filter,
    parse_json,
    parse_limit,
    text_or_none,
)

OPERATION_PARAMETERS = frozenset({"letter_id", "op", "actor", "limit"})
_GROUP_PARAMETERS = LIST_PARAMETERS - {"limit"}

Reader = Annotated[ApiKey, Depends(role("operator", "auditor"))]
Operator = Annotated[ApiKey, Depends(role("operator"))]


class RedriveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Comment = ""


class DiscardBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Comment = Field(min_length=1, description="why the work is given up (required)")


class BulkRedriveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Comment = ""
    filter: dict[str, Any] = Field(
        description="list filters (service, category, event_type, since, until, limit); "
        "at least one of the first five"
    )


def bad_parameter(parameter: str, message: str) -> Problem:
    return Problem(400, f"Invalid parameter: {parameter}", message, parameter=parameter)


def bad_field(pointer: str, message: str) -> Problem:
    return Problem(
        422, "Invalid request", f"{pointer}: {message}", errors=[{"pointer": pointer, "message": message}]
    )


def routes(rt: RuntimeHandle) -> APIRouter:
    max_bulk: int = rt.settings.bulk_redrive_max
    router = api_router(tags=["dead letters"], responses=problems(400, 401, 403, 404, 409, 415, 422))

    def query_filter(request: Request, allowed: frozenset[str] = LIST_PARAMETERS) -> LetterFilter:
        try:
            return parse_filter(request.query_params, allowed=allowed)
        except FilterError as exc:
            raise bad_parameter(exc.parameter, exc.message) from None

    # Literal paths first: "groups" and "redrive" would otherwise match {id}.
    @router.get("/v1/dead-letters", summary="List dead letters, newest first")
    async def list_letters(request: Request, who: Reader) -> dict[str, Any]:
        f = query_filter(request)
        async with rt.pool.acquire() as conn:
            letters = await repo.list_letters(conn, f)
        return {"items": [letter_summary(x) for x in letters], "count": len(letters), "limit": f.limit}

    @router.get("/v1/dead-letters/groups", summary="Counts by service, category and status")
    async def groups(request: Request, who: Reader) -> dict[str, Any]:
        f = query_filter(request, _GROUP_PARAMETERS)
        async with rt.pool.acquire() as conn:
            rows = await repo.groups(conn, f)
        return {"groups": [group_json(g) for g in rows]}

    @router.post("/v1/dead-letters/redrive", summary="Redrive every open letter a filter matches")
    async def redrive_matching(body: BulkRedriveBody, who: Operator) -> dict[str, Any]:
        f = _bulk_filter(body.filter, max_bulk)
        done = await _answering(
            operations.redrive_matching(rt, f, actor=who.principal, reason=body.reason.strip())
        )
        return {"items": [done_json(d) for d in done], "count": len(done)}

    @router.get("/v1/dead-letters/{letter_id}", summary="One letter with its original bytes")
    async def show(letter_id: str, who: Reader) -> dict[str, Any]:
        key = _letter_id(letter_id)
        async with rt.pool.acquire() as conn:
            letter = await repo.get_letter(conn, key)
            if letter is None:
                raise _not_found(letter_id)
            ops = await repo.list_operations(conn, letter_id=key, limit=MAX_LIMIT)
        return letter_detail(letter, ops)

    @router.post("/v1/dead-letters/{letter_id}/redrive", summary="Publish the original again")
    async def redrive(letter_id: str, who: Operator, body: RedriveBody | None = None) -> dict[str, Any]:
        reason = body.reason.strip() if body else ""
        done = await _answering(
            operations.redrive(rt, _letter_id(letter_id), actor=who.principal, reason=reason)
        )
        return done_json(done)

    @router.post("/v1/dead-letters/{letter_id}/discard", summary="Give up; release the workflow")
    async def discard(letter_id: str, body: DiscardBody, who: Operator) -> dict[str, Any]:
        if not body.reason.strip():
            raise bad_field("/reason", "say why (a non-empty string)")
        done = await _answering(
            operations.discard(rt, _letter_id(letter_id), actor=who.principal, reason=body.reason.strip())
        )
        return done_json(done)

    @router.get("/v1/operations", summary="The audit trail of redrives and discards")
    async def list_operations(request: Request, who: Reader) -> dict[str, Any]:
        query = request.query_params
        unknown = sorted(set(query) - OPERATION_PARAMETERS)
        if unknown:
            raise bad_parameter(
                unknown[0], f"unknown parameter; expected one of {sorted(OPERATION_PARAMETERS)}"
            )
        letter_id: uuid.UUID | None = None
        if query.get("letter_id"):
            try:
                letter_id = uuid.UUID(query["letter_id"])
            except ValueError:
                raise bad_parameter("letter_id", "is not a UUID") from None
        op = query.get("op") or None
        if op is not None and op not in ("redrive", "discard"):
            raise bad_parameter("op", f"{op!r} is not one of ['discard', 'redrive']")
        try:
            limit = parse_limit(query.get("limit"), MAX_LIMIT)
        except FilterError as exc:
            raise bad_parameter(exc.parameter, exc.message) from None
        async with rt.pool.acquire() as conn:
            rows = await repo.list_operations(
                conn, letter_id=letter_id, op=op, actor=query.get("actor") or None, limit=limit
            )
        return {"items": [operation_json(o) for o in rows], "count": len(rows)}

    return router


async def _answering(operation: Any) -> Any:
    """The operation's result; its refusals as problems (404 unknown, 409 not open)."""
    try:
        return await operation
    except operations.LetterNotFoundError as exc:
        raise _not_found(exc.letter_id) from None
    except operations.LetterNotOpenError as exc:
        raise Problem(
            409,
            f"Dead letter is already {exc.letter.status}",
            str(exc),
            letter_id=str(exc.letter.id),
            letter_status=exc.letter.status,
            resolved_by=exc.letter.resolved_by,
            resolved_at=_iso(exc.letter.resolved_at),
            operation=operation_json(exc.operation),
        ) from None


def _bulk_filter(raw: Mapping[str, object], max_bulk: int) -> LetterFilter:
    try:
        f = parse_filter(raw, max_limit=max_bulk)
    except FilterError as exc:
        raise bad_field(f"/filter/{exc.parameter}", exc.message) from None
    if f.status not in (None, OPEN):
        raise bad_field("/filter/status", "only open letters can be redriven")
    if not f.narrows:
        # Redriving every open letter at once is never what an operator means by
        # an empty filter; name a service, category, event type or time range.
        raise bad_field("/filter", "name at least one of service, category, event_type, since, until")
    return f


def _letter_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise _not_found(raw) from None


def _not_found(letter_id: str) -> Problem:
    return Problem(404, "No such dead letter", f"no dead letter with id {letter_id}", letter_id=letter_id)


# -- JSON shapes ------------------------------------------------------------------------------


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode() if data is not None else None


def letter_summary(letter: Letter) -> dict[str, Any]:
    return {
        "id": str(letter.id),
        "status": letter.status,
        "service": letter.service,
        "service_version": letter.service_version,
        "consumer_group": letter.consumer_group,
        "original_event_type": letter.original_event_type,
        "original_event_id": letter.original_event_id,
        "original_workflow_id": letter.original_workflow_id,
        "error": {
            "category": letter.error_category,
            "error_class": letter.error_class,
            "message": letter.error_message,
        },
        "original": {
            "topic": letter.original_topic,
            "partition": letter.original_partition,
            "offset": letter.original_offset,
        },
        "attempts": letter.attempts,
        "dead_lettered_at": _iso(letter.dead_lettered_at),
        "received_at": _iso(letter.received_at),
        "resolved_at": _iso(letter.resolved_at),
        "resolved_by": letter.resolved_by,
    }


def letter_detail(letter: Letter, ops: list[OperationRow]) -> dict[str, Any]:
    body = letter_summary(letter)
    value_json, is_json = parse_json(letter.original_value)
    body["error"] = {
        **body["error"],
        "traceback": letter.error_traceback,
        "pointer": letter.error_pointer,
    }
    body["original"] = {
        **body["original"],
        "key_b64": _b64(letter.original_key),
        "key": text_or_none(letter.original_key),
        "headers": [
            {
                "key": h["key"],
                "value_b64": h["value_b64"],
                "value": text_or_none(base64.b64decode(h["value_b64"]))
                if h["value_b64"] is not None
                else None,
            }
            for h in letter.original_headers
        ],
        "timestamp_ms": letter.original_timestamp_ms,
        "value_b64": _b64(letter.original_value),
        "value_is_json": is_json,
        "value_json": value_json,
    }
    body["failures"] = letter.failures
    body["envelope"] = letter.envelope
    body["operations"] = [operation_json(o) for o in ops]
    return body


def operation_json(op: OperationRow) -> dict[str, Any]:
    return {
        "id": op.id,
        "op": op.op,
        "letter_id": str(op.letter_id),
        "actor": op.actor,
        "reason": op.reason,
        "at": _iso(op.at),
        "result": op.result,
        "detail": op.detail,
    }


def group_json(g: Group) -> dict[str, Any]:
    return {
        "service": g.service,
        "category": g.category,
        "status": g.status,
        "count": g.count,
        "oldest": _iso(g.oldest),
        "newest": _iso(g.newest),
    }


def done_json(done: operations.Done) -> dict[str, Any]:
    return {"letter": letter_summary(done.letter), "operation": operation_json(done.operation)}
